/**
 * `npm run bench -- comm`: nccl-tests' bandwidth definitions, flag parsing, and a small real
 * run whose rows carry busbw = algbw × factor and a simulated time equal to the α-β formula.
 */
import { deepStrictEqual, equal, match, ok, throws } from 'node:assert/strict';
import { bandwidths, busBwFactor } from '../../src/comm/cost.ts';
import { type CommBenchRow, parseBytes, parseCommArgs } from '../../src/bench/comm.ts';
import { mpiTable, planeTable } from '../../src/bench/comm_planes.ts';
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

Deno.test('comm flags: sizes with units, and errors naming what is allowed', () => {
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
});

Deno.test({
  name: 'bench comm runs worlds of 2 and 3 and reports nccl-tests figures beside the α-β prediction',
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
      '--iters',
      '2',
      '--json',
      json,
      '--no-mpi',
    ]);
    equal(res.code, 0, res.stderr);
    match(res.stdout, /world size 3 · message plane · network intra=10GB\/s,2us/);
    match(res.stdout, /size\s+collective\s+algorithm\s+time ms\s+algbw GB\/s\s+busbw GB\/s\s+sim µs\s+α-β µs/);
    const rows = JSON.parse(await Deno.readTextFile(json)).rows as CommBenchRow[];
    equal(rows.length, 2 * 2 * (5 + 2) * 3); // worlds × planes × algorithms × sizes 4 B, 128 B, 4 KiB
    deepStrictEqual([...new Set(rows.map((r) => r.plane))], ['shared', 'message']);
    match(res.stdout, /world size 2 · shared plane/);
    match(
      res.stdout,
      /shared vs message plane\nsize\s+collective\s+algorithm\s+shared µs\s+message µs\s+shared speed-up/,
    );
    match(res.stdout, /MPICH comparison: skipped \(--no-mpi\)/);
    for (const r of rows) {
      ok(r.ms > 0 && Number.isFinite(r.ms));
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

Deno.test('the MPICH table divides MPI time by our fastest algorithm per plane', () => {
  const row = (plane: 'shared' | 'message' | undefined, algorithm: string, ms: number): CommBenchRow => ({
    coll: 'allReduce',
    algorithm,
    p: 2,
    plane,
    bytes: 4096,
    iters: 1,
    ms,
    algbw: 0,
    busbw: 0,
  });
  const ours = [row('shared', 'ring', 0.02), row('shared', 'direct', 0.04), row('message', 'ring', 0.1)];
  const t = mpiTable(ours, [row(undefined, 'mpi', 0.01)]);
  match(t, /4 KiB\s+allReduce p=2\s+10.00\s+20.00 \(ring\)\s+0.50×\s+100 \(ring\)\s+0.10×/);
  match(planeTable([row('shared', 'ring', 0.02), row('message', 'ring', 0.1)]), /20.00\s+100\s+5.00$/m);
});

Deno.test({
  name: 'bench comm runs MPICH at the same sizes and world size (mpirun) and prints the ratio per size',
  sanitizeResources: false,
  sanitizeOps: false,
  fn: async () => {
    const res = await runCli('bench.ts', [
      'comm',
      '--worlds',
      '2',
      '--ops',
      'allReduce',
      '--min-bytes',
      '4KiB',
      '--max-bytes',
      '64KiB',
      '--step',
      '16',
      '--iters',
      '2',
    ]);
    equal(res.code, 0, res.stderr);
    match(res.stdout, /MPICH's own collectives \(mpirun -n p\) vs ours/);
    match(res.stdout, /4 KiB\s+allReduce p=2\s+\S+\s+\S+ \(\S+\)\s+\S+×\s+\S+ \(\S+\)\s+\S+×/);
    match(res.stdout, /64 KiB\s+allReduce p=2/);
  },
});
