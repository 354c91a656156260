import { equal, ok } from 'node:assert/strict';
import { assertSteps, readLosses, runCli, spawnCli } from '../util/cli.ts';
import { exists } from '../../src/io/atomic.ts';

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
    const child = spawnCli('train.ts', [...ARGS, '--out', b]);
    // Kill (SIGKILL, no cleanup) once a checkpoint exists and training has moved past it.
    const deadline = Date.now() + 120_000;
    let killedAt = -1;
    while (Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 25));
      if (!(await exists(`${b}/ckpt.safetensors`)) || !(await exists(`${b}/metrics.jsonl`))) continue;
      const seen = await readLosses(`${b}/metrics.jsonl`).catch(() => new Map());
      if (seen.size >= 25) {
        child.kill('SIGKILL');
        killedAt = seen.size;
        break;
      }
    }
    await child.status;
    ok(killedAt > 0 && killedAt < 150, `killed mid-run (after ${killedAt} steps)`);

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
