import { deepStrictEqual, equal, ok, throws } from 'node:assert/strict';
import { checkpointSteps, isCheckpointStep } from '../../src/train/checkpoint.ts';
import { assertSteps, readLosses, runCli } from '../util/cli.ts';
import { exists } from '../../src/io/atomic.ts';

Deno.test('pythia checkpoint steps: 1, 2, 4 … 512, then every interval, and the last step', () => {
  deepStrictEqual(checkpointSteps(2000, 1000, 'pythia'), [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000, 2000]);
  deepStrictEqual(checkpointSteps(20, 8, 'pythia'), [1, 2, 4, 8, 16, 20]);
  deepStrictEqual(checkpointSteps(20, 8, 'interval'), [8, 16, 20]);
  deepStrictEqual(checkpointSteps(5, 0, 'interval'), [5]);
  ok(
    !isCheckpointStep(3, 20, 8, 'pythia') && isCheckpointStep(512, 600, 100, 'pythia') &&
      !isCheckpointStep(512, 600, 100, 'interval'),
  );
  throws(() => checkpointSteps(0, 1, 'pythia'), /steps must be a positive integer/);
});

const ARGS = [
  '--n-layer',
  '1',
  '--n-embd',
  '16',
  '--n-head',
  '2',
  '--block-size',
  '16',
  '--batch-size',
  '4',
  '--steps',
  '20',
  '--log-interval',
  '1',
  '--ckpt-interval',
  '8',
  '--eval-interval',
  '1000',
  '--eval-batches',
  '1',
  '--sample-tokens',
  '0',
  '--warmup',
  '3',
  '--ckpt-schedule',
  'pythia',
];

Deno.test({
  name: 'pythia schedule keeps self-contained ckpt-<step> files; resuming from ckpt-4 reproduces the run',
  sanitizeResources: false,
  fn: async () => {
    const dir = await Deno.makeTempDir();
    const full = await runCli('train.ts', [...ARGS, '--out', dir]);
    equal(full.code, 0, full.stderr);
    for (const s of [1, 2, 4, 8, 16, 20]) ok(await exists(`${dir}/ckpt-${s}.safetensors`), `ckpt-${s} kept`);
    for (const s of [3, 5, 12]) ok(!(await exists(`${dir}/ckpt-${s}.safetensors`)), `no ckpt-${s}`);
    const ref = await readLosses(`${dir}/metrics.jsonl`);
    assertSteps(ref, 20);
    const resumed = await runCli('train.ts', ['--out', dir, '--resume', '--resume-step', '4']);
    equal(resumed.code, 0, resumed.stderr);
    ok(/resuming at step 4\b/.test(resumed.stdout), resumed.stdout);
    const got = await readLosses(`${dir}/metrics.jsonl`);
    assertSteps(got, 20);
    for (const [step, loss] of ref) {
      ok(Math.abs(got.get(step)! - loss) <= 1e-5 * Math.abs(loss), `step ${step}: ${got.get(step)} vs ${loss}`);
    }
    const missing = await runCli('train.ts', ['--out', dir, '--resume', '--resume-step', '3']);
    equal(missing.code, 1);
    ok(/no checkpoint at .*ckpt-3\.safetensors/.test(missing.stderr), missing.stderr);
  },
});
