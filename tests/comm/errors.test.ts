/**
 * Failure behaviour of the collective layer: a mismatched call, a missing rank, a rank that
 * throws, point-to-point mismatches and launch validation. Each must fail with the documented
 * message well within its timeout — never hang.
 */
import { equal, match, ok } from 'node:assert/strict';
import { World } from '../../src/comm/launch.ts';
import { PLANES, withWorld, WORKER_TEST, workerUrl } from './world.ts';

/** Asserts that `p` rejects with an Error whose message matches `re`; returns the message. */
async function rejects(p: Promise<unknown>, re: RegExp | ((e: Error) => boolean)): Promise<string> {
  try {
    await p;
  } catch (e) {
    ok(e instanceof Error, `rejected with a non-Error: ${e}`);
    if (re instanceof RegExp) match(e.message, re);
    else ok(re(e));
    return e.message;
  }
  throw new Error('expected a rejection');
}

/** The collective timeout of the missing-rank tests: long against a loaded machine's scheduling, short for a test. */
const TIMEOUT_MS = 2000;

for (const dataPlane of PLANES) {
  Deno.test({
    name: `${dataPlane} plane: a rank calling a different collective fails at once with both calls named`,
    ...WORKER_TEST,
    fn: () =>
      withWorld(
        4,
        async (w) => {
          // The message is the header check's, which a timeout would not give; the collective timeout is past
          // the run limit, so waiting for it could not pass either way, and the wall-time guard is generous.
          const t0 = performance.now();
          await rejects(w.run('mismatch', { timeoutMs: 120_000 }), (e: Error) => {
            match(
              e.message,
              /^rank \d called (allReduce|reduceScatter)\(sum\/ring, f32×1024\) in group world#1 but rank \d sent (reduceScatter|allReduce)\(sum\/ring, f32×1024\)$/,
            );
            ok(/called allReduce.*sent reduceScatter|called reduceScatter.*sent allReduce/.test(e.message), e.message);
            return true;
          });
          ok(performance.now() - t0 < 30_000, 'detected by the header check, not by a timeout');
          await rejects(w.run('matrix', null), /world is down/);
        },
        undefined,
        undefined,
        { dataPlane },
      ),
  });

  Deno.test({
    name: `${dataPlane} plane: a missing rank makes every waiting rank time out naming it`,
    ...WORKER_TEST,
    fn: () =>
      withWorld(
        4,
        async (w) => {
          // The timeout is the only way out, so the message is exact; 2 s leaves the present ranks' allReduce
          // calls (after a barrier) far from it on a loaded machine, and the wall time is bounded only loosely.
          const t0 = performance.now();
          const got = await w.run<string>('missing', { timeoutMs: TIMEOUT_MS, catchLocally: true });
          const ms = performance.now() - t0;
          equal(got[3], 'skipped');
          for (let r = 0; r < 3; r++) {
            equal(
              got[r],
              `rank ${r} timed out after ${TIMEOUT_MS} ms in allReduce(sum/direct, f32×8) (group world#1) waiting for rank(s) 3`,
            );
          }
          ok(ms >= TIMEOUT_MS - 10, `the timeout fired after ${ms} ms, before its ${TIMEOUT_MS} ms`);
          ok(ms < 60_000, `took ${ms} ms: the waiting ranks hung`);
        },
        undefined,
        undefined,
        { dataPlane },
      ),
  });

  Deno.test({
    name: `${dataPlane} plane: a timeout aborts the whole world with the timed-out rank's error`,
    ...WORKER_TEST,
    fn: () =>
      withWorld(
        3,
        async (w) => {
          await rejects(
            w.run('missing', { timeoutMs: TIMEOUT_MS, catchLocally: false }),
            /^rank [01] timed out after 2000 ms in allReduce\(sum\/direct, f32×8\) \(group world#1\) waiting for rank\(s\) 2$/,
          );
        },
        undefined,
        undefined,
        { dataPlane },
      ),
  });

  Deno.test({
    name: `${dataPlane} plane: a rank that throws mid-collective stops every rank with its message`,
    ...WORKER_TEST,
    fn: () =>
      withWorld(
        4,
        async (w) => {
          const t0 = performance.now();
          await rejects(w.run('throws'), (e: Error) => {
            equal(e.message, 'rank 1: boom from rank 1');
            return true;
          });
          ok(performance.now() - t0 < 30_000, 'peers waiting on rank 1 (120 s timeout) were stopped, not timed out');
          await rejects(w.run('throws'), /world is down: rank 1: boom from rank 1/);
        },
        120_000,
        undefined,
        { dataPlane },
      ),
  });

  Deno.test({
    name: `${dataPlane} plane: send/recv: tagged ring exchange; a receive of the wrong length names both sides`,
    ...WORKER_TEST,
    fn: () =>
      withWorld(
        3,
        async (w) => {
          const res = await w.run<{ ok: boolean; mismatch: string }>('p2p');
          ok(res.every((r) => r.ok));
          equal(res[1].mismatch, 'rank 1 called recv(f32×5) in group world:p2p#1 but rank 0 sent send(f32×4)');
        },
        undefined,
        undefined,
        { dataPlane },
      ),
  });
}

Deno.test({
  name: 'a task that never returns is ended by the run limit, naming the ranks still running',
  ...WORKER_TEST,
  fn: () =>
    withWorld(
      2,
      async (w) => {
        await rejects(w.run('hang'), /^world: 'hang' ran past 10000 ms on rank\(s\) 0$/);
      },
      10_000,
      // The run limit also bounds the workers' start (join), which a loaded machine can stretch past a second.
      10_000,
    ),
});

Deno.test({
  name: 'a worker that fails to load aborts the launch with its error',
  ...WORKER_TEST,
  fn: async () => {
    const url = new URL('./no-such.worker.js', import.meta.url);
    await rejects(World.launch({ size: 2, url, runTimeoutMs: 10_000 }), /^rank [01]: \S/);
  },
});

Deno.test({
  name: 'launch rejects world sizes outside 1–16 and unknown tasks',
  ...WORKER_TEST,
  fn: async () => {
    const url = await workerUrl();
    await rejects(World.launch({ size: 0, url }), /world size 0 is outside 1–16/);
    await rejects(World.launch({ size: 17, url }), /world size 17 is outside 1–16/);
    await withWorld(2, async (w) => {
      await rejects(w.run('nope'), /^rank [01]: no task 'nope' \(have matrix, /);
    });
  },
});
