/**
 * Parallel runs leave no rank-worker bundle folder (src/cli/worker_bundle.ts) in the temp dir:
 * after a finished run, after a failed one, and after kill -9 once the next run has started.
 * Each run gets a private TMPDIR, so other processes' folders do not matter.
 */
import { deepEqual, equal, ok } from 'node:assert/strict';
import { runCli, TINY_RUN } from '../util/cli.ts';
import { spawnUntil } from '../util/spawn_until.ts';

const TINY = [...TINY_RUN, '--dp', '2'];

async function bundles(tmp: string): Promise<string[]> {
  const out: string[] = [];
  for await (const e of Deno.readDir(tmp)) if (e.name.startsWith('rank-worker-')) out.push(e.name);
  return out.sort();
}

Deno.test('dp2 runs leave no rank-worker folder: finished, failed, and killed with -9 then started again', async () => {
  const tmp = await Deno.makeTempDir({ prefix: 'temp-state-' }), env = { TMPDIR: tmp };
  const out = (name: string) => `${tmp}/${name}`; // run dirs beside the bundles: only rank-worker-* is checked
  try {
    const ok1 = await runCli('train.ts', [...TINY, '--steps', '1', '--out', out('ok')], env);
    equal(ok1.code, 0, ok1.stderr);
    deepEqual(await bundles(tmp), [], 'after a finished run');

    const bad = await runCli('train.ts', [
      ...TINY,
      '--steps',
      '3',
      '--lr',
      '1e39',
      '--warmup',
      '0',
      '--ckpt-interval',
      '1',
      '--out',
      out('bad'),
    ], env);
    equal(bad.code, 1, bad.stderr);
    deepEqual(await bundles(tmp), [], 'after a failed run');

    const killed = spawnUntil('train.ts', [...TINY, '--steps', '200', '--out', out('killed')], env);
    await killed.waitFor(/^step +0 \|/m);
    const theirs = await bundles(tmp);
    equal(theirs.length, 1, 'the running process has its bundle folder');
    ok(theirs[0].startsWith(`rank-worker-${killed.child.pid}-`), theirs[0]);
    killed.child.kill('SIGKILL');
    await killed.done();
    deepEqual(await bundles(tmp), theirs, 'kill -9 runs no clean-up');

    const next = await runCli('train.ts', [...TINY, '--steps', '1', '--out', out('next')], env);
    equal(next.code, 0, next.stderr);
    deepEqual(
      await bundles(tmp),
      [],
      "the next run removed the killed run's folder, and its own at exit",
    );
  } finally {
    await Deno.remove(tmp, { recursive: true });
  }
});
