/**
 * ZB-H1 composed with the other dimensions (docs/design.md#zero-bubble-zb-h1): the gradient syncs
 * see each parameter only in W (buckets.ts BucketHooks.weightsOnly), tp's, sp's and cp's collectives
 * run in B. gpt dp2 × pp2, tp2 × pp2 + sp, cp2 (ring) × pp2, dp2 × tp2 × pp2 with ZeRO-1 on in-process ranks against the
 * plain single-rank run of the same global batch (mesh_harness.ts checkMeshRun: losses within 1e-4
 * relative over 10 steps, gathered gradients, elements sent = the formula and stepTraffic), and
 * every rank's measured traffic per step = the model-derived traffic (cost/derived_rows.ts).
 */
import { deepStrictEqual } from 'node:assert/strict';
import { testGpu } from '../util/gpu.ts';
import { TEXT, tinyConfig } from './harness.ts';
import { twins } from './single_rank.ts';
import { checkMeshRun, localMeshRun } from './mesh_harness.ts';
import { derivedTraffic } from '../../src/parallel/cost/derived_rows.ts';
import { trafficByKind } from '../../src/parallel/cost/cost.ts';
import { sentByDim, trainerConfig } from '../../src/parallel/run/run.ts';
import { parseConfig } from '../../src/train/config.ts';
import { makePlan } from '../../src/parallel/plan/plan.ts';

Deno.test({
  name:
    'zb-h1 on gpt dp2×pp2, tp2×pp2+sp, cp2×pp2, dp2×tp2×pp2 ZeRO-1 matches the single-rank run; traffic = derivedTraffic',
  sanitizeResources: false,
  sanitizeOps: false,
  fn: async () => {
    const gpu = await testGpu(), twin = twins(gpu, TEXT), b8 = tinyConfig({ batchSize: 8 });
    const runs = [
      [b8, makePlan({ dp: 2, pp: 2, schedule: 'zb-h1', microBatches: 2 })],
      [tinyConfig(), makePlan({ tp: 2, sp: true, pp: 2, schedule: 'zb-h1', microBatches: 2 })],
      // Ring attention's backward passes (its p2p sends of K, V and their gradients) run in B.
      [tinyConfig(), makePlan({ cp: 2, cpKind: 'ring', pp: 2, schedule: 'zb-h1', microBatches: 2 })],
      [b8, makePlan({ dp: 2, tp: 2, pp: 2, zero: 1, schedule: 'zb-h1', microBatches: 2 })],
    ] as const;
    for (const [over, plan] of runs) {
      const what = `zb-h1 dp${plan.dp} cp${plan.cp} tp${plan.tp}${plan.sp ? '+sp' : ''} pp${plan.pp} ZeRO-${plan.zero}`;
      const ref = await twin(plan, over), res = await localMeshRun(gpu, plan, over, TEXT);
      checkMeshRun(what, plan, over, res, ref);
      for (const [r, x] of res.entries()) {
        const rows = await derivedTraffic(trainerConfig(plan, parseConfig(over)), plan, ref.vocabSize, r);
        for (const [s, sent] of x.sent.entries()) {
          deepStrictEqual(sentByDim(sent), Object.fromEntries(trafficByKind(rows)), `${what} rank ${r} step ${s}`);
        }
      }
    }
  },
});
