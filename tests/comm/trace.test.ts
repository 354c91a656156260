/**
 * Tracing: the spans of known collectives carry exactly the bytes each algorithm moves (from
 * chunkOffsets), the Chrome Trace Event JSON is structurally what Perfetto reads, and a
 * 4-worker ring allReduce merged on the host shows 2(p−1) steps per rank on both timelines.
 */
import { deepStrictEqual, equal, ok } from 'node:assert/strict';
import { chunkOffsets } from '../../src/comm/algorithms.ts';
import { closeLocalWorld, localWorld, onEveryRank } from '../../src/comm/local.ts';
import {
  type ChromeTrace,
  SIM_PID,
  toChromeTrace,
  traceTotals,
  validateChromeTrace,
  WALL_PID,
} from '../../src/comm/trace.ts';
import { withWorld, WORKER_TEST } from './world.ts';

/** Bytes rank r sends to r+1 in a ring allReduce of n f32 over p ranks (reduce-scatter + all-gather). */
function ringBytes(n: number, p: number, r: number): number {
  const offs = chunkOffsets(n, p);
  const size = (c: number) => offs[((c % p) + p) % p + 1] - offs[((c % p) + p) % p];
  let els = 0;
  for (let s = 0; s < p - 1; s++) els += size(r - s - 1) + size(r - s);
  return els * 4;
}

Deno.test('ring allReduce spans: 2(p−1) sends per rank, bytes per pair from chunkOffsets', async () => {
  for (const [p, n] of [[2, 7], [3, 10], [4, 1001], [5, 3]]) {
    const world = localWorld(p);
    await onEveryRank(world, (c) => c.allReduce(new Float32Array(n), { algorithm: 'ring' }));
    const spans = world.flatMap((c) => c.tracer.spans);
    const t = traceTotals(spans);
    const want: Record<string, number> = {};
    for (let r = 0; r < p; r++) want[`${r}>${(r + 1) % p}`] = ringBytes(n, p, r);
    deepStrictEqual(t.bytesByPair, want, `p=${p} n=${n}`);
    equal(t.messagesByOp.allReduce, 2 * (p - 1) * p);
    for (let r = 0; r < p; r++) {
      const mine = spans.filter((s) => s.rank === r);
      equal(mine.filter((s) => s.kind === 'send').length, 2 * (p - 1));
      equal(mine.filter((s) => s.kind === 'recv').length, 2 * (p - 1));
      const coll = mine.filter((s) => s.kind === 'collective');
      equal(coll.length, 1);
      deepStrictEqual([coll[0].op, coll[0].algorithm, coll[0].group, coll[0].bytes], [
        'allReduce',
        'ring',
        'world',
        n * 4,
      ]);
      ok(mine.every((s) => s.end >= s.start && s.simEnd >= s.simStart));
    }
    closeLocalWorld(world);
  }
});

Deno.test('direct allToAll and binomial broadcast move the bytes their algorithms define', async () => {
  const p = 4, n = 12;
  const world = localWorld(p);
  await onEveryRank(world, (c) => c.allToAll(new Int32Array(n)));
  await onEveryRank(world, (c) => c.broadcast(new Float32Array(5), 1));
  const t = traceTotals(world.flatMap((c) => c.tracer.spans));
  equal(t.bytesByOp.allToAll, p * (p - 1) * (n / p) * 4); // every rank sends p−1 chunks
  equal(t.messagesByOp.broadcast, p - 1); // a tree reaches p−1 ranks once each
  equal(t.bytesByOp.broadcast, (p - 1) * 5 * 4);
  equal(t.totalBytes, t.bytesByOp.allToAll + t.bytesByOp.broadcast);
  closeLocalWorld(world);
});

Deno.test('Chrome trace JSON: metadata, X events on both timelines, validation catches breakage', async () => {
  const world = localWorld(3, { net: 'nvlink-ib' });
  await onEveryRank(world, async (c) => {
    await c.tracer.span('forward', () => new Promise((r) => setTimeout(r, 2)));
    await c.allReduce(new Float32Array(30), { algorithm: 'rabenseifner' });
  });
  const spans = world.flatMap((c) => c.tracer.spans);
  const json = JSON.parse(JSON.stringify(toChromeTrace(spans, { run: 'test' }))) as ChromeTrace;
  deepStrictEqual(validateChromeTrace(json), []);
  const x = json.traceEvents.filter((e) => e.ph === 'X');
  equal(x.length, 2 * spans.length);
  deepStrictEqual([...new Set(x.map((e) => e.pid))].sort(), [WALL_PID, SIM_PID]);
  deepStrictEqual([...new Set(x.map((e) => e.tid))].sort(), [0, 1, 2]);
  const names = json.traceEvents.filter((e) => e.ph === 'M').map((e) => `${e.pid}/${e.tid} ${e.args?.name}`);
  ok(names.includes('1/2 rank 2') && names.includes('0/0 wall clock'), names.join('; '));
  ok(x.some((e) => e.name === 'allReduce (rabenseifner)' && e.args?.bytes === 120));
  ok(x.some((e) => e.name === 'forward' && e.cat === 'compute'));
  equal((json.otherData?.totals as { totalBytes: number }).totalBytes, traceTotals(spans).totalBytes);
  equal(json.otherData?.run, 'test');
  ok(validateChromeTrace({ traceEvents: [{ name: 'a', ph: 'X', pid: 0, tid: 0, ts: 1, dur: -1 }] }).length === 1);
  ok(validateChromeTrace({ events: [] }).length === 1);
  closeLocalWorld(world);
});

Deno.test({
  name: 'a 4-worker ring allReduce merges into one trace.json with 2(p−1) steps per rank',
  ...WORKER_TEST,
  fn: () =>
    withWorld(
      4,
      async (w) => {
        const p = 4, n = 1 << 16;
        await w.run('one', { coll: 'allReduce', algorithm: 'ring', bytes: n * 4 });
        const json = JSON.parse(JSON.stringify(await w.chromeTrace({ run: 'ring' }))) as ChromeTrace;
        deepStrictEqual(validateChromeTrace(json), []);
        for (let r = 0; r < p; r++) {
          for (const pid of [WALL_PID, SIM_PID]) {
            const sends = json.traceEvents.filter((e) =>
              e.ph === 'X' && e.pid === pid && e.tid === r && e.cat === 'send'
            );
            equal(sends.length, 2 * (p - 1), `rank ${r} pid ${pid}`);
            ok(sends.every((e) => e.args?.bytes === (n / p) * 4 && e.args?.peer === (r + 1) % p));
          }
        }
        // Simulated: 2(p−1) steps of α + (n/p)·4 bytes / β on nvlink-ib's intra link (node of 8).
        const ends = json.traceEvents.filter((e) => e.pid === SIM_PID && e.cat === 'collective').map((e) =>
          e.ts! + e.dur!
        );
        const want = 2 * (p - 1) * (1 + (n / p) * 4 / 300e3);
        ok(ends.length === p && ends.every((t) => Math.abs(t - want) < 1e-6 * want), `${ends} vs ${want}`);
        equal((await w.trace(true)).length, 4 * (1 + 4 * (p - 1)));
        equal((await w.trace()).length, 0);
      },
      10_000,
      60_000,
      { net: 'nvlink-ib' },
    ),
});
