/**
 * `npm run train` when the GPU device is lost mid-run (fault injection through the environment,
 * src/cli/train.ts LOSE_DEVICE_ENV): one error line that says so, names the last checkpoint kept
 * and how to resume; the checkpoint is intact, and resuming finishes the run.
 */
import { equal, match, ok } from 'node:assert/strict';
import { runCli, TINY_RUN } from '../util/cli.ts';
import { LOSE_DEVICE_ENV } from '../../src/cli/train.ts';
import { parseCheckpoint } from '../../src/train/checkpoint.ts';

Deno.test({
  name: 'train: a device lost at step 3 stops the run with one clear line; the step-2 checkpoint is kept and resumes',
  sanitizeResources: false,
  fn: async () => {
    const dir = await Deno.makeTempDir();
    try {
      const args = [...TINY_RUN, '--steps', '5', '--ckpt-interval', '2', '--out', dir];
      const r = await runCli('train.ts', args, { [LOSE_DEVICE_ENV]: '3' });
      equal(r.code, 1, `exit 1 (stdout: ${r.stdout})`);
      const errors = r.stderr.trim().split('\n').filter((l) => l.startsWith('error:'));
      equal(errors.length, 1, r.stderr);
      match(errors[0], /the GPU device was lost \(reason 'destroyed'/);
      match(
        errors[0],
        /the last checkpoint \(step 2\) in .* is kept: resume with: npm run train -- --out \S+ --resume/,
      );
      const ckpt = await parseCheckpoint(await Deno.readFile(`${dir}/ckpt.safetensors`), 'kept');
      equal(ckpt.state.step, 2);
      const resumed = await runCli('train.ts', ['--resume', '--out', dir]);
      equal(resumed.code, 0, resumed.stderr);
      ok(/resuming at step 2/.test(resumed.stdout), resumed.stdout);
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});
