/**
 * `npm run bench -- comm`: nccl-tests' bandwidth definitions, flag parsing, the time-bounded
 * loop's rules (nextChunk, summarize), and a small real run whose rows carry min ≤ median ≤ p90,
 * busbw = algbw × factor and a simulated time equal to the α-β formula. Never timings.
 */
import { deepStrictEqual, equal, match, ok, throws } from 'node:assert/strict';
import { bandwidths, busBwFactor } from '../../src/comm/cost.ts';
import { type CommBenchRow, parseBytes, parseCommArgs } from '../../src/bench/comm.ts';
import { DEFAULT_BUDGET, nextChunk, QUICK_BUDGET, summarize } from '../../src/comm/timing.ts';
import { runCli } from '../util/cli.ts';

Deno.test("busbw factors are nccl-tests': 2(p−1)/p allReduce, (p−1)/p gather/scatter/all-to-all, 1 rooted", () => {
  deepStrictEqual(
    (['allReduce', 'reduceScatter', 'allGather', 'allToAll', 'broadcast', 'reduce'] as const).map((c) =>
      busBwFactor(c, 8)
    ),
    [1.75, 0.875, 0.875, 0.875, 1, 1],
  );
  deepStrictEqual(bandwidths('allReduce', 2e9, 1000, 4), { algbw: 2, busbw: 3 }); // 2 GB in 1 s
});

Deno.test('comm flags: sizes with units, the timing budget, and errors naming what is allowed', () => {
  equal(parseBytes('64MiB', '--max-bytes'), 64 << 20);
  equal(parseBytes('4KiB', '--max-bytes'), 4096);
  equal(parseBytes('4', '--min-bytes'), 4);
  throws(() => parseBytes('2', '--min-bytes'), /--min-bytes must be at least 4 bytes/);
  throws(() => parseBytes('lots', '--max-bytes'), /--max-bytes expects a size like 4, 4KiB or 64MiB, got 'lots'/);
  const o = parseCommArgs(['--worlds', '2,3', '--ops', 'allReduce', '--max-bytes', '1MiB', '--step', '4']);
  deepStrictEqual([o.worlds, o.collectives, o.maxBytes, o.step, o.minBytes], [[2, 3], ['allReduce'], 1 << 20, 4, 4]);
  throws(() => parseCommArgs(['--worlds', '0']), /--worlds expects comma-separated sizes in 1–16/);
  throws(() => parseCommArgs(['--ops', 'allreduce']), /unknown collective 'allreduce'; allowed: allReduce/);
  throws(() => parseCommArgs(['--net', 'fast']), /network: unknown field 'fast'/);
  throws(() => parseCommArgs(['--bogus']), /Unknown option '--bogus'/);
  throws(() => parseCommArgs(['--min-bytes', '1KiB', '--max-bytes', '64']), /below --min-bytes/);
  deepStrictEqual(parseCommArgs([]).planes, ['shared', 'message']);
  deepStrictEqual(parseCommArgs(['--data-plane', 'message']).planes, ['message']);
  throws(() => parseCommArgs(['--data-plane', 'shm']), /--data-plane expects shared, message or both, got 'shm'/);
  deepStrictEqual(parseCommArgs([]).budget, DEFAULT_BUDGET);
  deepStrictEqual(parseCommArgs(['--quick']).budget, QUICK_BUDGET);
  deepStrictEqual(
    parseCommArgs(['--quick', '--min-ms', '50', '--warmup', '2', '--warmup-ms', '0', '--min-iters', '7']).budget,
    { ...QUICK_BUDGET, minMs: 50, warmup: 2, warmupMs: 0, minIters: 7 },
  );
  throws(() => parseCommArgs(['--min-ms=1.5']), /--min-ms expects a whole number ≥ 0, got '1.5'/);
  throws(() => parseCommArgs(['--warmup', '0']), /--warmup expects a whole number ≥ 1, got '0'/);
  throws(() => parseCommArgs(['--min-iters', '2.5']), /--min-iters expects a whole number ≥ 1/);
  throws(() => parseCommArgs(['--min-iters', '9', '--max-iters', '8']), /--max-iters \(8\) is below --min-iters/);
});

Deno.test('the loop runs ≥ K calls and ≥ M ms, ≤ the cap; percentiles are nearest-rank', () => {
  // A call of 0.5 ms: K = 4 first, then batches aiming at 10 ms (×1.2), until both hold.
  let done = 0, elapsed = 0;
  const batches = [];
  for (let n; (n = nextChunk(done, elapsed, 4, 10, 1000)) > 0;) batches.push(n), done += n, elapsed += n * 0.5;
  deepStrictEqual(batches, [4, 20]);
  ok(done >= 4 && elapsed >= 10);
  equal(nextChunk(0, 0, 3, 0, 1000), 3); // no minimum time: K calls
  equal(nextChunk(3, 0.01, 3, 0, 1000), 0);
  equal(nextChunk(990, 1, 3, 1e9, 1000), 10); // the cap bounds a batch…
  equal(nextChunk(1000, 1, 3, 1e9, 1000), 0); // …and the loop
  const s = summarize([5, 1, 4, 2, 3, 10, 6, 7, 9, 8]);
  deepStrictEqual(s, { iters: 10, min: 1, median: 5, p90: 9, mean: 5.5 });
  deepStrictEqual(summarize([3]), { iters: 1, min: 3, median: 3, p90: 3, mean: 3 });
  throws(() => summarize([]), /no timed calls/);
});

Deno.test({
  name: 'bench comm runs worlds of 2 and 3 and reports min/median/p90 and nccl-tests figures beside the α-β prediction',
  sanitizeResources: false,
  sanitizeOps: false,
  fn: async () => {
    const json = await Deno.makeTempFile({ suffix: '.json' });
    const res = await runCli('bench.ts', [
      'comm',
      '--worlds',
      '2,3',
      '--ops',
      'allReduce,broadcast',
      '--max-bytes',
      '4KiB',
      '--step',
      '32',
      '--net',
      'link=10GB/s,2us',
      '--quick',
      '--min-ms',
      '2',
      '--json',
      json,
      '--no-mpi',
    ]);
    equal(res.code, 0, res.stderr);
    match(res.stdout, /≥ 1 warm-up calls and ≥ 0 ms of them, then ≥ 3 timed calls and ≥ 2 ms of them/);
    match(res.stdout, /world size 3 · message plane · network intra=10GB\/s,2us/);
    match(
      res.stdout,
      /size\s+collective\s+algorithm\s+calls\s+min µs\s+median µs\s+p90 µs\s+algbw GB\/s\s+busbw GB\/s\s+sim µs\s+α-β µs/,
    );
    const out = JSON.parse(await Deno.readTextFile(json));
    deepStrictEqual(out.budget, { ...QUICK_BUDGET, minMs: 2 });
    const rows = out.rows as CommBenchRow[];
    equal(rows.length, 2 * 2 * (5 + 2) * 3); // worlds × planes × algorithms × sizes 4 B, 128 B, 4 KiB
    deepStrictEqual([...new Set(rows.map((r) => r.plane))], ['shared', 'message']);
    match(res.stdout, /world size 2 · shared plane/);
    match(res.stdout, /shared vs message plane \(median µs per call\)\nsize\s+collective\s+algorithm\s+shared µs\s+/);
    match(res.stdout, /\d+\.\d\d× (slower|faster)|same/);
    match(res.stdout, /MPICH comparison: skipped \(--no-mpi\)/);
    for (const r of rows) {
      ok(r.min > 0 && r.min <= r.median && r.median <= r.p90 && r.min <= r.mean, JSON.stringify(r));
      // The ranks agree on the summed call time of the slowest: its mean × calls reaches --min-ms.
      // (f32 agreement: a relative tolerance.)
      ok(r.iters >= 3 && r.mean * r.iters >= 2 * (1 - 1e-6), `${r.iters} calls, mean ${r.mean} ms`);
      ok(r.firstMs! > 0);
      ok(Math.abs(r.algbw - r.bytes / r.median / 1e6) < 1e-9 * r.algbw);
      ok(Math.abs(r.busbw - r.algbw * busBwFactor(r.coll, r.p)) < 1e-12 * r.busbw);
      // The formulas assume equal chunks (S a multiple of 4p bytes) and, for the trees, p a power of two.
      if (r.bytes % (4 * r.p) === 0 && (r.p === 2 || r.algorithm === 'ring' || r.algorithm === 'direct')) {
        ok(
          Math.abs(r.simUs! - r.predictedUs!) < 1e-6 * r.predictedUs!,
          `${r.coll}/${r.algorithm} p=${r.p} S=${r.bytes}: ${r.simUs} vs ${r.predictedUs}`,
        );
      }
    }
    const bad = await runCli('bench.ts', ['comm', '--step', '1']);
    equal(bad.code, 2);
    match(bad.stderr, /--step must be an integer ≥ 2/);
    await Deno.remove(json);
  },
});
