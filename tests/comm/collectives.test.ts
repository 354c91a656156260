/**
 * Every collective × algorithm × op × dtype × in/out of place, bit-exact against the CPU
 * reference (integer-valued inputs), in worlds of 1…8 ranks and in subset groups. Each world is
 * launched once and runs the whole matrix (tests/comm/scenario.worker.ts checks on each rank), on
 * each data plane (shared rings and MessagePorts, docs/design.md#the-shared-data-plane-of-worker-ranks).
 */
import { deepStrictEqual, ok } from 'node:assert/strict';
import { PLANES, type Report, withWorld, WORKER_TEST } from './world.ts';
import { chunkOffsets } from '../../src/comm/algorithms.ts';
import { fold } from '../../src/comm/halving_doubling.ts';

const opts = WORKER_TEST;

for (const dataPlane of PLANES) {
  for (let n = 1; n <= 8; n++) {
    Deno.test({
      name: `${dataPlane} plane: collectives are bit-exact vs the CPU reference in a world of ${n}`,
      ...opts,
      fn: () =>
        withWorld(
          n,
          async (w) => {
            const reps = await w.run<Report>('matrix', null);
            deepStrictEqual(reps.flatMap((r) => r.failures), []);
            // 2 dtypes × 2 modes × (allReduce, reduceScatter, allGather, broadcast, reduce, allToAll) + barriers
            for (const r of reps) {
              ok(r.cases > 500, `only ${r.cases} cases ran`);
            }
          },
          undefined,
          undefined,
          { dataPlane },
        ),
    });
  }

  Deno.test({
    name:
      `${dataPlane} plane: subset groups of a world of 8 run the matrix concurrently with their own sequence numbers`,
    ...opts,
    fn: () =>
      withWorld(
        8,
        async (w) => {
          const a = await w.run<Report>('matrix', { groups: [[1, 3, 4, 6], [7, 0, 2], [5]] });
          deepStrictEqual(a.flatMap((r) => r.failures), []);
          ok(a.every((r) => r.cases > 500));
        },
        undefined,
        undefined,
        { dataPlane },
      ),
  });
}

Deno.test('chunkOffsets splits unevenly, larger chunks first', () => {
  deepStrictEqual(chunkOffsets(10, 4), [0, 3, 6, 8, 10]);
  deepStrictEqual(chunkOffsets(2, 4), [0, 1, 2, 2, 2]);
});

Deno.test('MPICH fold: 6 ranks → pof2 4, even ranks below 2·rem sit out', () => {
  deepStrictEqual([...Array(6).keys()].map((r) => fold(6, r).newRank), [-1, 0, -1, 1, 2, 3]);
  const f = fold(6, 0);
  deepStrictEqual([0, 1, 2, 3].map(f.real), [1, 3, 4, 5]);
  deepStrictEqual([0, 1, 2, 3].map(f.chunks), [[0, 2], [2, 4], [4, 5], [5, 6]]);
});
