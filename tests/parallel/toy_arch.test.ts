/**
 * An architecture added from the test tree only (tests/util/toy_arch.ts: embedding, two MLP
 * blocks, tied head, a split declaration) gets exact parameter counts per rank under tp 2, pp 2
 * and dp 2 × ZeRO-3 with no edit in src/: counted by building it (src/parallel/cost/derived_params.ts),
 * and every rank's real rank model (mesh/rank_model.ts over a meta GPU) agrees; and exact per-step
 * traffic under the same plans, counted from one step of its real trainer (src/parallel/cost/derived_traffic.ts).
 * The expected numbers are the toy's declaration and its collectives summed by hand.
 */
import { deepEqual, equal } from 'node:assert/strict';
import { parseConfig, type TrainConfig } from '../../src/train/config.ts';
import type { ArchName } from '../../src/models/archs.ts';
import { makePlan, type ParallelPlan, planWorldSize, type RankParams } from '../../src/parallel/plan/plan.ts';
import { countParams, derivedRankParams, silentWorld } from '../../src/parallel/cost/derived_params.ts';
import { rankModel } from '../../src/parallel/mesh/rank_model.ts';
import { MetaGpu } from '../../src/gpu/meta.ts';
import { zeroMemoryFp32 } from '../../src/perf/memory_cost.ts';
import { registerToy } from '../util/toy_arch.ts';
import { derivedStepTraffic } from '../../src/parallel/cost/derived_traffic.ts';
import { sentByDim } from '../../src/parallel/cost/rank_traffic.ts';

registerToy();
const V = 64, T = 16, C = 32;
// The toy is not in the config schema's arch enum: it exists only once registered.
const CFG = {
  ...parseConfig({ nLayer: 2, nHead: 2, nEmbd: C, blockSize: T, batchSize: 4 }),
  arch: 'toy' as ArchName,
} as TrainConfig;
const LN = 2 * C, UP = 4 * C * C + 4 * C, DOWN = 4 * C * C + C, BLOCK = LN + UP + DOWN;

function perRank(over: Partial<ParallelPlan>): RankParams[] {
  const plan = makePlan(over), count = derivedRankParams(CFG, V), world = planWorldSize(plan);
  return [...Array(world).keys()].map((r) => {
    const built = rankModel(new MetaGpu(), CFG, plan, silentWorld(r, world), V);
    deepEqual(count(plan, r), countParams(built.stages.params.params, 'toy', plan.tp), `rank ${r} built = derived`);
    return count(plan, r);
  });
}

Deno.test('toy arch, tp 2: each rank holds half of wte, up and down.weight; norms, wpe and down.bias whole', () => {
  const half = (V / 2) * C + T * C + 2 * (LN + UP / 2 + (4 * C * C) / 2 + C) + LN;
  const replicated = T * C + 2 * (LN + C) + LN;
  for (const p of perRank({ tp: 2 })) {
    deepEqual(p, { dense: half, expert: 0, spReplicated: replicated, embedding: (V / 2) * C });
  }
});

Deno.test('toy arch, pp 2: stage 0 wte, wpe and block 0; stage 1 block 1, ln_f and its copy of the tied wte', () => {
  const [first, last] = perRank({ pp: 2 });
  deepEqual(first, { dense: V * C + T * C + BLOCK, expert: 0, spReplicated: 0, embedding: V * C });
  deepEqual(last, { dense: BLOCK + LN + V * C, expert: 0, spReplicated: 0, embedding: V * C });
});

Deno.test('toy arch, dp 2 × ZeRO-3: each rank holds the whole model, sharded to ⌈Ψ/2⌉ of values, gradients, moments', () => {
  const psi = V * C + T * C + 2 * BLOCK + LN, ranks = perRank({ dp: 2, zero: 3 });
  equal(ranks.length, 2);
  for (const p of ranks) deepEqual(p, { dense: psi, expert: 0, spReplicated: 0, embedding: V * C });
  equal(zeroMemoryFp32(ranks[0].dense, 2, 3).total, 16 * Math.ceil(psi / 2));
});

/** Every rank's derived step traffic under `over` (one micro-batch of CFG's 4 rows), per dimension and collective. */
async function trafficPerRank(over: Partial<ParallelPlan>): Promise<Record<string, number>[]> {
  const plan = makePlan(over), out: Record<string, number>[] = [];
  for (let r = 0; r < planWorldSize(plan); r++) out.push(sentByDim((await derivedStepTraffic(CFG, plan, V, r)).sent));
  return out;
}

// b·s·C of one micro-batch (4 rows of T tokens); every collective below is a ring over 2 ranks, whose allReduce of
// n sends n, all-gather and reduce-scatter n/2. The trainer's [‖g‖², loss] allReduce over the world counts as dp.
const BSH = 4 * T * C, SCALARS = { 'dp/allReduce': 2 };

Deno.test('toy arch, tp 2: per step each rank sends 6 activation allReduces of b·s·C and the cross-entropy 3 of b·s', async () => {
  // Per block up's input gradient (backward) and down's output (forward); the embedding's output and the head's input.
  const tp = 2 * 2 * BSH + BSH + BSH, ce = 3 * 4 * T;
  for (const t of await trafficPerRank({ tp: 2 })) deepEqual(t, { 'tp/allReduce': tp + ce, ...SCALARS });
});

Deno.test('toy arch, pp 2: per step one activation forward, its gradient back, the tied wte gradient summed', async () => {
  for (const t of await trafficPerRank({ pp: 2 })) {
    deepEqual(t, { 'pp/send': BSH, 'pp/allReduce': V * C, ...SCALARS });
  }
});

Deno.test('toy arch, dp 2 × ZeRO-3: each unit gathered forward and backward, its gradient reduce-scattered', async () => {
  // ZeRO units (zero_units.ts): embedding, each block, the final norm; each parameter 64-element aligned in the
  // flat store, each unit padded to 64·d.
  const a = (n: number) => Math.ceil(n / 64) * 64, unit = (n: number) => Math.ceil(n / 128) * 128;
  const block = 2 * a(C) + a(4 * C * C) + a(4 * C) + a(4 * C * C) + a(C);
  const units = unit(a(V * C) + a(T * C)) + 2 * unit(block) + unit(2 * a(C));
  for (const t of await trafficPerRank({ dp: 2, zero: 3 })) {
    deepEqual(t, { 'dp/allGather': 2 * (units / 2), 'dp/reduceScatter': units / 2, 'dp/allReduce': 2 });
  }
});
