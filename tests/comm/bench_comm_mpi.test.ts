/**
 * The comm bench's MPI reference (src/bench/mpi_ref.ts): MPICH's own collective called three
 * ways — a C loop built with mpicc, synchronous Deno FFI, this project's helper thread — each
 * labelled, and ratios that say in words which side is slower. Structure only, never timings.
 */
import { deepStrictEqual, equal, match, ok } from 'node:assert/strict';
import type { CommBenchRow } from '../../src/bench/comm.ts';
import { mpiTable, planeTable, timeRatio } from '../../src/bench/comm_planes.ts';
import { runCli } from '../util/cli.ts';

const row = (over: Partial<CommBenchRow>): CommBenchRow => ({
  coll: 'allReduce',
  algorithm: 'ring',
  p: 2,
  bytes: 4096,
  iters: 3,
  min: 0,
  median: 0,
  p90: 0,
  mean: 0,
  algbw: 0,
  busbw: 0,
  ...over,
});

Deno.test('time ratios read as what they are: ours over the reference, "slower" when ours takes longer', () => {
  equal(timeRatio(0.3, 0.1), '3.00× slower');
  equal(timeRatio(0.1, 0.4), '4.00× faster');
  equal(timeRatio(0.1, 0.1001), 'same');
});

Deno.test('the MPI table puts the three MPI columns beside our fastest algorithm per plane, labelled', () => {
  const ours = [
    row({ plane: 'shared', algorithm: 'ring', median: 0.02 }),
    row({ plane: 'shared', algorithm: 'direct', median: 0.04 }),
    row({ plane: 'message', algorithm: 'ring', median: 0.1 }),
  ];
  const mpi = [
    row({ algorithm: 'mpi', source: 'c-loop', median: 0.004 }),
    row({ algorithm: 'mpi', source: 'ffi-sync', median: 0.01 }),
    row({ algorithm: 'mpi', source: 'helper-thread', median: 0.5 }),
  ];
  const lines = mpiTable(ours, mpi).split('\n');
  const head = lines[0].split(/\s{2,}/);
  deepStrictEqual(head, [
    'size',
    'collective',
    'MPI (C loop) µs',
    'MPI (FFI, sync) µs',
    'MPI via our helper thread µs',
    'shared µs (algorithm)',
    'message µs (algorithm)',
    'shared vs C loop',
    'shared vs FFI sync',
    'helper vs FFI sync',
  ]);
  deepStrictEqual(lines[2].trim().split(/\s{2,}/), [
    '4 KiB',
    'allReduce p=2',
    '4.00',
    '10.00',
    '500',
    '20.00 (ring)',
    '100 (ring)',
    '5.00× slower',
    '2.00× slower',
    '50.00× slower',
  ]);
  // Without a C loop (no mpicc) its columns go, the rest stay.
  const noC = mpiTable(ours, mpi.slice(1)).split('\n')[0];
  ok(!noC.includes('C loop') && noC.includes('MPI (FFI, sync) µs'), noC);
  match(
    planeTable([row({ plane: 'shared', median: 0.02 }), row({ plane: 'message', median: 0.1 })]),
    /20.00\s+100\s+5.00× faster$/m,
  );
});

Deno.test({
  name: 'bench comm times MPICH from C, from synchronous FFI and through our helper thread (mpirun -n 2)',
  sanitizeResources: false,
  sanitizeOps: false,
  fn: async () => {
    const json = await Deno.makeTempFile({ suffix: '.json' });
    const res = await runCli('bench.ts', [
      'comm',
      '--worlds',
      '2',
      '--ops',
      'allReduce,broadcast',
      '--data-plane',
      'shared',
      '--min-bytes',
      '4KiB',
      '--max-bytes',
      '64KiB',
      '--step',
      '16',
      '--quick',
      '--min-ms',
      '1',
      // --quick stops a row at 1000 calls; MPICH's C loop can make 1000 calls in under 1 ms.
      '--max-iters',
      '1000000',
      '--json',
      json,
    ]);
    equal(res.code, 0, res.stderr);
    match(res.stdout, /MPICH's own collective \(allReduce: MPI_Allreduce, broadcast: MPI_Bcast\) vs ours/);
    match(res.stdout, /MPI \(C loop\): a C loop of the call, built with mpicc -O2/);
    match(res.stdout, /MPI \(C loop\) µs\s+MPI \(FFI, sync\) µs\s+MPI via our helper thread µs\s+shared µs/);
    for (const size of ['4 KiB', '64 KiB']) {
      for (const coll of ['allReduce', 'broadcast']) {
        match(
          res.stdout,
          new RegExp(
            `^${size}\\s+${coll} p=2(\\s+\\S+){3}\\s+\\S+ \\(\\S+\\)(\\s+\\S+× (slower|faster)|\\s+same){3}$`,
            'm',
          ),
        );
      }
    }
    const rows = JSON.parse(await Deno.readTextFile(json)).rows as CommBenchRow[];
    const mpi = rows.filter((r) => r.algorithm === 'mpi');
    deepStrictEqual(
      mpi.map((r) => `${r.source} ${r.coll} ${r.bytes}`).sort(),
      ['c-loop', 'ffi-sync', 'helper-thread'].flatMap((s) =>
        ['allReduce', 'broadcast'].flatMap((c) => [4096, 65536].map((b) => `${s} ${c} ${b}`))
      ).sort(),
    );
    for (const r of mpi) {
      ok(r.p === 2 && r.min > 0 && r.min <= r.median && r.median <= r.p90 && r.firstMs! > 0, JSON.stringify(r));
      // f32 statistics on the helper path: a relative tolerance.
      ok(r.iters >= 3 && r.mean * r.iters >= 1 * (1 - 1e-6), JSON.stringify(r));
    }
    await Deno.remove(json);
  },
});
