/**
 * Expert parallelism composed with the other dimensions by the mesh trainer
 * (src/parallel/mesh/mesh_trainer.ts): the MoE models' own pieces over a RankContext whose MoE
 * function exchanges tokens over the rank's EP group (ep inside dp, DeepSpeed-MoE's layout), also
 * under ZeRO (dense parameters sharded over dp, each expert over the ranks holding it).
 * Checked against the single-rank run of the same model (the same micro-batches) routing each
 * micro-batch in dp token groups, one per rank: losses within 1e-4 relative and norms within 1e-3 on every
 * rank over 10 steps, the step-0 gradients by relative RMS and the final parameters gathered
 * from the shards, each rank's parameters = the planner's, and the elements each rank sends per
 * step = the traffic counted from the model (cost/derived_rows.ts), every row exact.
 */
import { deepStrictEqual, equal, ok } from 'node:assert/strict';
import { gpuTest } from '../util/gpu.ts';
import { assertClose, assertRelRms } from '../util/assert.ts';
import { maxRel, TEXT, tinyConfig } from './harness.ts';
import { epReference, gatherShards, meshDemands } from './ep_harness.ts';
import { localMeshRun } from './mesh_harness.ts';
import { microConfig } from './mesh_rank.ts';
import { flat } from './single_rank.ts';
import { makePlan, type ParallelPlan, rankParams } from '../../src/parallel/plan/plan.ts';
import { trafficByKind } from '../../src/parallel/cost/cost.ts';
import { derivedTraffic } from '../../src/parallel/cost/derived_rows.ts';
import { rankMemory } from '../../src/perf/memory_cost.ts';
import { planModelOf, sentByDim, trainerConfig } from '../../src/parallel/run/run.ts';
import { strategyOf } from '../../src/parallel/plan/strategy.ts';
import { parseConfig, type TrainConfig } from '../../src/train/config.ts';
import { CharTokenizer } from '../../src/data/tokenizer.ts';

const MOE: Partial<TrainConfig> = { nExpert: 4, moeTopK: 2, capacityFactor: 1.25, auxLossWeight: 0.01, moeEvery: 1 };

const CASES: [string, Partial<TrainConfig>, Partial<ParallelPlan>][] = [
  ['gpt-moe ep2 × tp2', { arch: 'gpt-moe', ...MOE }, { dp: 2, ep: 2, tp: 2 }],
  // Selective recomputation reruns the attention cores; the MoE sub-layer and its routing stay.
  ['gpt-moe ep2 × tp2 + sp, recompute selective', { arch: 'gpt-moe', ...MOE, recompute: 'selective' }, {
    dp: 2,
    ep: 2,
    tp: 2,
    sp: true,
  }],
  // The load-balancing loss of stage 0's MoE layers enters its own backward and the reported loss.
  ['mamba-moe ep2 × pp2 (1F1B)', { arch: 'mamba-moe', nEmbd: 16, ...MOE }, {
    dp: 2,
    ep: 2,
    pp: 2,
    schedule: '1f1b',
    microBatches: 2,
  }],
  // ZB-H1: the MoE layer's all-to-alls are backward rules, run in B; the experts' gradients come from W.
  ['gpt-moe ep2 × pp2 (ZB-H1)', { arch: 'gpt-moe', ...MOE }, {
    dp: 2,
    ep: 2,
    pp: 2,
    schedule: 'zb-h1',
    microBatches: 2,
  }],
  // ZeRO under ep: dense parameters sharded over dp4, each expert over the two ranks holding it
  // (its expert-data-parallel group, EP index = dp mod 2); the smallest world with both groups.
  ['gpt-moe dp4 × ep2 × ZeRO-1', { arch: 'gpt-moe', ...MOE }, { dp: 4, ep: 2, zero: 1 }],
  ['gpt-moe dp4 × ep2 × ZeRO-3', { arch: 'gpt-moe', ...MOE }, { dp: 4, ep: 2, zero: 3 }],
  // Sequence parallelism: each tp rank routes its rows as one token group through the replicated
  // experts (the twin routes in dp·tp groups), seeds 1/tp of its group's load-balancing gradient,
  // and the experts' partial gradients are summed over tp with the norms'.
  ['gpt-moe tp2 + sp', { arch: 'gpt-moe', ...MOE }, { tp: 2, sp: true }],
  ['gpt-moe dp2 × tp2 + sp × pp2 (1F1B)', { arch: 'gpt-moe', ...MOE }, {
    dp: 2,
    tp: 2,
    sp: true,
    pp: 2,
    microBatches: 2,
  }],
  ['mamba-moe ep2 × tp2 + sp', { arch: 'mamba-moe', nEmbd: 16, ...MOE }, { dp: 2, ep: 2, tp: 2, sp: true }],
  // Each rank holds its experts alone (ep = dp): only the dense units are sharded.
  ['gpt-moe dp2 × ep2 × ZeRO-2 (2 micro-batches)', { arch: 'gpt-moe', ...MOE, gradAccum: 2 }, {
    dp: 2,
    ep: 2,
    zero: 2,
    microBatches: 2,
  }],
];

for (const [what, extra, p] of CASES) {
  gpuTest(`${what}: matches the single-rank run; parameters and traffic = the planner's exactly`, async (gpu) => {
    const over = tinyConfig(extra), plan = makePlan(p);
    equal(strategyOf(plan, extra.arch!), 'mesh');
    // Each rank routes its rows of each micro-batch as one group: the twin routes every micro-batch in dp (·tp under sp) groups.
    const groups = plan.dp * (plan.sp ? plan.tp : 1);
    const ref = await epReference(gpu, { cfg: microConfig(plan, over), text: TEXT }, groups);
    const res = await localMeshRun(gpu, plan, over, TEXT);
    // The groups the run's log counts from (moe_routing.ts) are the twin's: the same demand per group, block and micro-batch.
    ref.demands.forEach((want, s) =>
      deepStrictEqual(meshDemands(res.map((x) => x.routings[s])), want, `${what} step ${s}`)
    );
    const cfg = trainerConfig(plan, parseConfig(over)), V = CharTokenizer.fromText(TEXT).vocabSize;
    const model = planModelOf(plan, cfg, V);
    for (const [r, x] of res.entries()) {
      ok(maxRel(x.losses, ref.losses) < 1e-4, `${what} rank ${r}: losses ${x.losses} vs ${ref.losses}`);
      ok(maxRel(x.gradNorms, ref.gradNorms) < 1e-3, `${what} rank ${r}: norms ${x.gradNorms} vs ${ref.gradNorms}`);
      const want = rankParams(plan, model, r, cfg.bias);
      equal(x.count, want.dense + want.expert, `${what} rank ${r}: parameters held vs the planner`);
      const rows = await derivedTraffic(cfg, plan, V, r);
      deepStrictEqual(rows.filter((row) => !row.exact).map((row) => row.what), [], `${what} rank ${r}: rows exact`);
      if (x.zero) {
        // npm run plan's model-state bytes (dense over dp, experts over their edp group), up to
        // the 256-byte alignment of each piece and unit that the formula does not count.
        const predicted = rankMemory(plan, model, r, cfg.bias), n = x.zero.buckets.length + x.zero.expertBuckets.length;
        for (const k of ['params', 'grads', 'optimizer'] as const) {
          const gap = x.zero.memory[k] - predicted[k];
          ok(
            gap >= 0 && gap <= 4 * 64 * 4 * n,
            `${what} rank ${r}: ${k} ${x.zero.memory[k]} B vs predicted ${predicted[k]} B`,
          );
        }
      }
      for (const [s, sent] of x.sent.entries()) {
        deepStrictEqual(
          sentByDim(sent),
          Object.fromEntries(trafficByKind(rows)),
          `${what} rank ${r} step ${s}`,
        );
      }
    }
    const names = Object.keys(ref.grads0);
    const grads = gatherShards(gpu, plan, res.map((x) => x.grads0), over, V);
    assertRelRms(flat(grads, names), flat(ref.grads0, names), `${what}: step-0 gradients`);
    const params = gatherShards(gpu, plan, res.map((x) => x.params), over, V);
    assertClose(flat(params, names), flat(ref.params, names), `${what}: parameters after 10 steps`);
  });
}
