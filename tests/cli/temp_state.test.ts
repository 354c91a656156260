/**
 * Parallel runs leave no rank-worker bundle folder (src/cli/worker_bundle.ts) in the temp dir:
 * after a finished run, after a failed one, and after kill -9 once the next run has started.
 * Each run gets a private TMPDIR, so other processes' folders do not matter. And a run removes
 * the `<file>.<hex8>.tmp` files that a writer killed mid-write left in its run directory.
 */
import { deepEqual, equal, ok } from 'node:assert/strict';
import { runCli, TINY_RUN } from '../util/cli.ts';
import { spawnUntil } from '../util/spawn_until.ts';
import { exists } from '../../src/io/atomic.ts';

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

Deno.test('a resumed run removes the temp files of atomic writes a killed run left, and nothing else', async () => {
  const dir = await Deno.makeTempDir({ prefix: 'temp-writes-' });
  try {
    const first = await runCli('train.ts', [...TINY_RUN, '--steps', '1', '--out', dir]);
    equal(first.code, 0, first.stderr);
    await Deno.mkdir(`${dir}/ckpt-parallel-3`);
    const left = [`${dir}/ckpt.safetensors.deadbeef.tmp`, `${dir}/ckpt-parallel-3/rank-0.safetensors.0123abcd.tmp`];
    const kept = [`${dir}/notes.tmp`, `${dir}/sub.0123abcd.tmp.txt`];
    for (const p of [...left, ...kept]) await Deno.writeTextFile(p, 'partial');
    const resumed = await runCli('train.ts', ['--out', dir, '--resume', '--steps', '2']);
    equal(resumed.code, 0, resumed.stderr);
    for (const p of left) ok(!(await exists(p)), `${p} was left behind`);
    for (const p of kept) ok(await exists(p), `${p} is not a temp write and must stay`);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
