/**
 * src/comm/trace_bytes.ts and the Tracer's step stamping (trace.ts), without a GPU: collectives
 * inside `step N` spans of a local world are read back from the Chrome trace per rank, step and
 * `group/op` with the element counts the algorithms define; traces without `args.step` (written
 * before it existed) attribute by wall-time containment to the same result; malformed traces
 * are refused with the event named.
 */
import { deepStrictEqual, equal, throws } from 'node:assert/strict';
import { closeLocalWorld, localWorld, onEveryRank } from '../../src/comm/local.ts';
import { type ChromeTrace, stepOfSpanName, toChromeTrace, WALL_PID } from '../../src/comm/trace.ts';
import { sentElements, traceSends } from '../../src/comm/trace_bytes.ts';

/** 3 ranks: a set-up broadcast, then steps 0 and 1 (each a ring allReduce of n and a p2p send 0→1 of k·(step+1) i32). */
async function traced(n: number, k: number): Promise<ChromeTrace> {
  const world = localWorld(3);
  try {
    await onEveryRank(world, async (c) => {
      await c.broadcast(new Float32Array(5), 0);
      for (let s = 0; s < 2; s++) {
        await c.tracer.span(`step ${s}`, async () => {
          await c.tracer.span('gpu.read', () => c.allReduce(new Float32Array(n), { algorithm: 'ring' }));
          if (c.rank === 0) await c.send(new Int32Array(k * (s + 1)), 1);
          if (c.rank === 1) await c.recv(new Int32Array(k * (s + 1)), 0);
        }, { sim: false });
      }
    });
    return JSON.parse(JSON.stringify(toChromeTrace(world.flatMap((c) => c.tracer.spans))));
  } finally {
    closeLocalWorld(world);
  }
}

/** What the calls above send: ring allReduce 2(p−1)/p·n per rank (n divisible by p), binomial broadcast from 0 over 3 ranks. */
function expected(rows: ReturnType<typeof traceSends>, n: number, k: number) {
  const p = 3, ring = (2 * (p - 1) * n) / p;
  const ar = rows.flatMap((r) => Object.keys(r.sent)).find((key) => key.endsWith('/allReduce'))!;
  const p2p = rows.flatMap((r) => Object.keys(r.sent)).find((key) => key.endsWith('/send'))!;
  for (const rank of [0, 1, 2]) {
    for (const step of [0, 1]) {
      const want: Record<string, number> = { [ar]: ring };
      if (rank === 0) want[p2p] = k * (step + 1);
      deepStrictEqual(sentElements(rows, rank, step), want, `rank ${rank} step ${step}`);
    }
  }
  // Binomial tree from rank 0 over 3 ranks: rank 0 sends to 1 and 2 (or to 1, which forwards); 2 messages of 5 in all.
  const setup = rows.filter((r) => r.step === null);
  equal(setup.reduce((a, r) => a + (r.sent['world/broadcast']?.elements ?? 0), 0), 2 * 5);
  equal(setup.reduce((a, r) => a + (r.sent['world/broadcast']?.messages ?? 0), 0), 2);
}

Deno.test('stepOfSpanName reads `step N` only', () => {
  deepStrictEqual(['step 0', 'step 12', 'step', 'step -1', 'stepping 3', 'step 3 fwd'].map(stepOfSpanName), [
    0,
    12,
    undefined,
    undefined,
    undefined,
    undefined,
  ]);
});

Deno.test('traceSends: per rank, step and group/op, the elements the algorithms send; set-up sends have step null', async () => {
  const n = 12, k = 7, trace = await traced(n, k);
  const rows = traceSends(trace);
  expected(rows, n, k);
  deepStrictEqual(rows.filter((r) => r.step !== null).map((r) => [r.rank, r.step]), [[0, 0], [0, 1], [1, 0], [1, 1], [
    2,
    0,
  ], [2, 1]]);
  for (const r of rows) for (const c of Object.values(r.sent)) equal(c.bytes, 4 * c.elements);
  // Messages and the nested compute span carry their step; the step spans carry their own.
  const wall = trace.traceEvents.filter((e) => e.ph === 'X' && e.pid === WALL_PID);
  equal(wall.filter((e) => e.name === 'gpu.read').map((e) => e.args?.step).join(), '0,1,0,1,0,1');
  deepStrictEqual(
    [...new Set(wall.filter((e) => /^step /.test(e.name)).map((e) => `${e.name}=${e.args?.step}`))].sort(),
    ['step 0=0', 'step 1=1'],
  );
  deepStrictEqual(wall.filter((e) => e.cat === 'send' && e.args?.op === 'broadcast').map((e) => e.args?.step), [
    undefined,
    undefined,
  ]);
});

Deno.test("traceSends: a trace without args.step (older trace.json) is attributed by the step spans' wall times, to the same counts", async () => {
  const n = 6, k = 3, trace = await traced(n, k);
  const legacy = structuredClone(trace);
  for (const e of legacy.traceEvents) {
    delete e.args?.step;
    delete e.args?.elements;
  }
  deepStrictEqual(traceSends(legacy), traceSends(trace));
  expected(traceSends(legacy), n, k);
});

Deno.test('traceSends: an explicit step option wins over the span name; tampering and malformed traces fail', async () => {
  const world = localWorld(2);
  try {
    await onEveryRank(world, (c) => c.tracer.span('forward', () => c.allReduce(new Float32Array(4)), { step: 7 }));
    const trace = JSON.parse(JSON.stringify(toChromeTrace(world.flatMap((c) => c.tracer.spans)))) as ChromeTrace;
    const rows = traceSends(trace);
    deepStrictEqual(rows.map((r) => [r.rank, r.step]), [[0, 7], [1, 7]]);
    const i = trace.traceEvents.findIndex((e) => e.pid === WALL_PID && e.cat === 'send' && e.tid === 1);
    const before = sentElements(rows, 1, 7)['world/allReduce'];
    const dropped = structuredClone(trace);
    dropped.traceEvents.splice(i, 1);
    equal(
      sentElements(traceSends(dropped), 1, 7)['world/allReduce'],
      before - (trace.traceEvents[i].args!.elements as number),
    );
    const t = (f: (a: Record<string, unknown>) => void) => {
      const c = structuredClone(trace);
      f(c.traceEvents[i].args!);
      return () => traceSends(c);
    };
    throws(
      t((a) => (a.elements = (a.elements as number) + 1)),
      /send event \d+ \(rank 1\): args\.elements \d+ disagrees with args\.bytes/,
    );
    throws(t((a) => (a.bytes = 6)), /args\.bytes 6 is not a non-negative multiple of 4/);
    throws(t((a) => (a.step = -1)), /args\.step -1 is not a non-negative integer/);
    throws(t((a) => delete a.op), /args\.op and args\.group must be strings/);
    throws(() => traceSends({}), /no traceEvents array/);
    throws(() => traceSends(null), /no traceEvents array/);
  } finally {
    closeLocalWorld(world);
  }
});

Deno.test('traceSends on e2e/fixtures/trace.json (a real dp 2 × pp 2 trace written before args.step): every send falls in a step, the same every step', async () => {
  const trace = JSON.parse(await Deno.readTextFile(new URL('../../e2e/fixtures/trace.json', import.meta.url)));
  equal(
    trace.traceEvents.some((e: { args?: { step?: number } }) => e.args?.step !== undefined),
    false,
    'the fixture predates args.step',
  );
  const rows = traceSends(trace);
  deepStrictEqual(
    rows.map((r) => `${r.rank}:${r.step}`),
    [0, 1, 2, 3].flatMap((r) => [0, 1, 2, 3].map((s) => `${r}:${s}`)),
  );
  for (const r of rows) {
    deepStrictEqual(
      sentElements(rows, r.rank, r.step),
      sentElements(rows, r.rank, 0),
      `rank ${r.rank} step ${r.step} sends what step 0 sent`,
    );
  }
  // The [norm, loss] ring allReduce over the 4 ranks moves 2(p−1)·n = 12 elements in all, whatever the chunking.
  for (const s of [0, 1, 2, 3]) {
    equal(
      rows.filter((r) => r.step === s).reduce((a, r) => a + (r.sent['world/scalars/allReduce']?.elements ?? 0), 0),
      2 * 3 * 2,
    );
  }
});
