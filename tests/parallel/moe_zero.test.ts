/**
 * Both MoE architectures under every ZeRO stage with experts spread over the dp ranks (ep2 within
 * dp2, DeepSpeed-MoE's layout, and once ep2 × tp2): the mesh trainer against the single-rank run
 * routing each micro-batch in the same token groups (one per dp rank), which tells a capacity or
 * routing difference (docs/design.md#moe-under-dp-and-zero; tests/parallel/moe_split_routing.test.ts)
 * apart from a wrong expert gradient. Each step the ranks' groups must ask the experts for exactly
 * the tokens the twin's groups do (the demand the run's log counts from), the losses agree within
 * 2e-6 relative and the norms within 1e-5 (float rounding, ~1e-7 measured on lavapipe: the same
 * sums in another order; AdamW hides a wrong gradient scale from the loss — a doubled expert
 * gradient moves it by 3e-5 only — so the step-0 gradients are compared too, by relative RMS),
 * and the final parameters gathered from the shards.
 * gpt-moe dp4 × ep2 under ZeRO-1/3 and dp2 × ep2 × ZeRO-2 over 2 micro-batches are in ep_mesh.test.ts.
 */
import { deepStrictEqual, ok } from 'node:assert/strict';
import { gpuTest } from '../util/gpu.ts';
import { assertClose, assertRelRms } from '../util/assert.ts';
import { maxRel, TEXT, tinyConfig } from './harness.ts';
import { epReference, gatherShards, meshDemands } from './ep_harness.ts';
import { localMeshRun } from './mesh_harness.ts';
import { microConfig } from './mesh_rank.ts';
import { flat } from './single_rank.ts';
import { makePlan, type ParallelPlan } from '../../src/parallel/plan/plan.ts';
import type { TrainConfig } from '../../src/train/config.ts';
import { CharTokenizer } from '../../src/data/tokenizer.ts';

// Capacity factor 1 so that capacity binds: a group split otherwise than the twin's would show.
const MOE = { nEmbd: 16, nExpert: 4, capacityFactor: 1, auxLossWeight: 0.01, moeEvery: 1, steps: 6 };
const GPT: Partial<TrainConfig> = { arch: 'gpt-moe', ...MOE, moeTopK: 1 };
const MAMBA: Partial<TrainConfig> = { arch: 'mamba-moe', ...MOE, moeTopK: 2 };

const CASES: [string, Partial<TrainConfig>, Partial<ParallelPlan>][] = [
  ['gpt-moe dp2 × ep2 × ZeRO-1', GPT, { dp: 2, ep: 2, zero: 1 }],
  ['gpt-moe dp2 × ep2 × ZeRO-2', GPT, { dp: 2, ep: 2, zero: 2 }],
  ['gpt-moe dp2 × ep2 × ZeRO-3', GPT, { dp: 2, ep: 2, zero: 3 }],
  ['mamba-moe dp2 × ep2 (no ZeRO)', MAMBA, { dp: 2, ep: 2 }],
  ['mamba-moe dp2 × ep2 × ZeRO-2', MAMBA, { dp: 2, ep: 2, zero: 2 }],
  ['mamba-moe dp2 × ep2 × ZeRO-3', MAMBA, { dp: 2, ep: 2, zero: 3 }],
  // Experts over ep within dp, the dense weights also split over tp: ZeRO shards each tp shard over dp.
  ['gpt-moe dp2 × ep2 × tp2 × ZeRO-2', GPT, { dp: 2, ep: 2, tp: 2, zero: 2 }],
];

for (const [what, extra, p] of CASES) {
  gpuTest(`${what}: routes the twin's token groups, matches its losses, gradients and parameters`, async (gpu) => {
    const over = tinyConfig(extra), plan = makePlan(p), V = CharTokenizer.fromText(TEXT).vocabSize;
    const ref = await epReference(gpu, { cfg: microConfig(plan, over), text: TEXT }, plan.dp);
    const res = await localMeshRun(gpu, plan, over, TEXT);
    for (let s = 0; s < ref.losses.length; s++) {
      deepStrictEqual(
        meshDemands(res.map((x) => x.routings[s])),
        ref.demands[s],
        `${what} step ${s}: demand per group`,
      );
    }
    for (const [r, x] of res.entries()) {
      ok(maxRel(x.losses, ref.losses) < 2e-6, `${what} rank ${r}: losses ${x.losses} vs ${ref.losses}`);
      ok(maxRel(x.gradNorms, ref.gradNorms) < 1e-5, `${what} rank ${r}: norms ${x.gradNorms} vs ${ref.gradNorms}`);
    }
    const names = Object.keys(ref.grads0);
    const grads = gatherShards(gpu, plan, res.map((x) => x.grads0), over, V);
    assertRelRms(flat(grads, names), flat(ref.grads0, names), `${what}: step-0 gradients`);
    const params = gatherShards(gpu, plan, res.map((x) => x.params), over, V);
    assertClose(flat(params, names), flat(ref.params, names), `${what}: parameters after ${ref.losses.length} steps`);
  });
}
