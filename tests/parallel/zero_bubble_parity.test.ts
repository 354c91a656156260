/**
 * ZB-H1 executed (docs/design.md#zero-bubble-zb-h1): gpt on pp 2 and pp 4 in-process ranks, each
 * backward run as the tape's B then, later, W, against the plain single-rank run of the same global
 * batch. mesh_harness.ts checkMeshRun: losses within 1e-4 relative over 10 steps, the gathered
 * step-0 gradients by relative RMS, the elements sent per step = the formula and cost.ts stepTraffic;
 * here also = the model-derived traffic (cost/derived_rows.ts derivedTraffic) on every rank, and the
 * measured timeline shows each W after its B.
 */
import { deepStrictEqual, ok } from 'node:assert/strict';
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
  name: 'zb-h1 on gpt pp2 (m 2, 4) and pp4 (m 4) matches the single-rank run; traffic = derivedTraffic',
  sanitizeResources: false,
  sanitizeOps: false,
  fn: async () => {
    const gpu = await testGpu(), twin = twins(gpu, TEXT);
    const runs = [
      [tinyConfig(), makePlan({ pp: 2, schedule: 'zb-h1', microBatches: 2 })],
      [tinyConfig(), makePlan({ pp: 2, schedule: 'zb-h1', microBatches: 4 })],
      [tinyConfig({ nLayer: 4 }), makePlan({ pp: 4, schedule: 'zb-h1', microBatches: 4 })],
    ] as const;
    for (const [over, plan] of runs) {
      const what = `zb-h1 pp${plan.pp} m ${plan.microBatches}`, ref = await twin(plan, over);
      const res = await localMeshRun(gpu, plan, over, TEXT);
      checkMeshRun(what, plan, over, res, ref);
      for (const [r, x] of res.entries()) {
        const rows = await derivedTraffic(trainerConfig(plan, parseConfig(over)), plan, ref.vocabSize, r);
        for (const [s, sent] of x.sent.entries()) {
          deepStrictEqual(sentByDim(sent), Object.fromEntries(trafficByKind(rows)), `${what} rank ${r} step ${s}`);
        }
        const labels = x.timelines[0].map((s) => s.label);
        for (let i = 0; i < plan.microBatches; i++) {
          const b = labels.indexOf(`B${i}@${r}`), w = labels.indexOf(`W${i}@${r}`);
          ok(b >= 0 && w > b, `${what} rank ${r}: W${i} (span ${w}) after B${i} (span ${b}) in ${labels}`);
        }
      }
    }
  },
});
