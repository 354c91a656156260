/**
 * Tensor collectives (src/comm/tensor_comm.ts) in worlds of 2 and 3 Deno workers, each rank
 * with its own GPUDevice: read back, exchange, write back — bit-exact on integer-valued inputs,
 * in place and out of place — and the errors for tensors the wire cannot carry.
 */
import { deepStrictEqual, match, ok } from 'node:assert/strict';
import { type Report, withWorld, WORKER_TEST } from './world.ts';
import { openRankGpus } from '../util/rank_gpu.ts';

for (const n of [2, 3]) {
  Deno.test({
    name: `tensor collectives are bit-exact on ${n} ranks with one GPU device each`,
    ...WORKER_TEST,
    fn: () =>
      withWorld(
        n,
        async (w) => {
          await openRankGpus(w);
          const reps = await w.run<Report & { adapter: string }>('gpuMatrix', null);
          deepStrictEqual(reps.flatMap((r) => r.failures), []);
          for (const r of reps) {
            ok(r.cases > 80, `only ${r.cases} cases ran`);
          }
        },
        20_000,
        120_000,
        { worker: 'gpu.worker.ts' },
      ),
  });
}

Deno.test({
  name: 'tensor collectives refuse u32 tensors and mismatched outputs, saying why',
  ...WORKER_TEST,
  fn: () =>
    withWorld(
      2,
      async (w) => {
        await openRankGpus(w);
        const [errs] = await w.run<string[]>('gpuErrors', null);
        match(errs[0], /^collectives take f32 or i32 tensors, got u32/);
        match(errs[1], /^allReduce: out has 5 elements, needs 4$/);
        match(errs[2], /^allReduce: out is i32 but the input is f32$/);
        match(errs[3], /^reduceScatter: tensor of 5 elements does not split over 2 ranks$/);
      },
      20_000,
      60_000,
      { worker: 'gpu.worker.ts' },
    ),
});
