import { equal, ok } from 'node:assert/strict';
import { assertSteps, readLosses, runCli } from '../util/cli.ts';
import { spawnUntil } from '../util/spawn_until.ts';

const ARGS = [
  '--n-layer',
  '1',
  '--n-embd',
  '32',
  '--n-head',
  '2',
  '--block-size',
  '16',
  '--batch-size',
  '4',
  '--steps',
  '150',
  '--log-interval',
  '1',
  '--ckpt-interval',
  '20',
  '--eval-interval',
  '1000',
  '--eval-batches',
  '1',
  '--sample-tokens',
  '0',
  '--warmup',
  '10',
];

Deno.test({
  name: 'a run killed mid-way and resumed reproduces the uninterrupted losses',
  sanitizeResources: false,
  sanitizeOps: false,
  fn: async () => {
    const a = await Deno.makeTempDir();
    const full = await runCli('train.ts', [...ARGS, '--out', a]);
    equal(full.code, 0, full.stderr);
    const ref = await readLosses(`${a}/metrics.jsonl`);
    assertSteps(ref, 150);

    const b = await Deno.makeTempDir();
    // Kill (SIGKILL, no cleanup) once training has logged step 25, past the checkpoint of step 20: an event,
    // with no deadline; that the kill landed mid-run is then read from how the run ended.
    const child = spawnUntil('train.ts', [...ARGS, '--out', b]);
    await child.waitFor(/^step +25 \|/m);
    child.child.kill('SIGKILL');
    const k = await child.done();
    // Killed, not finished: a run that had ended would have exited 0 without the signal.
    equal(k.signal, 'SIGKILL', `the run ended before the kill: exit ${k.code}`);

    const resumed = await runCli('train.ts', ['--out', b, '--resume']);
    equal(resumed.code, 0, resumed.stderr);
    ok(/resuming at step (20|40|60|80|100|120|140)/.test(resumed.stdout), resumed.stdout);
    const got = await readLosses(`${b}/metrics.jsonl`);
    assertSteps(got, 150);
    for (const [step, loss] of ref) {
      const l = got.get(step)!;
      ok(Math.abs(l - loss) <= 1e-5 * Math.abs(loss), `step ${step}: resumed ${l} vs uninterrupted ${loss}`);
    }
  },
});
