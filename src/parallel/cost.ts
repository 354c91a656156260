/**
 * Analytical costs of a parallel plan (docs/design.md §17, §19): per-rank memory under
 * each ZeRO stage, the pipeline bubble, and the per-step traffic of a whole plan by parallel
 * dimension ({@link stepTraffic}, docs/design.md §17's table made exact). What one collective call
 * sends and costs is src/comm/cost.ts's.
 *
 * Units: elements (one f32 = 4 bytes), bytes. `n` is the element count of the buffer a call is
 * made with (src/comm/cost.ts's convention).
 */
import type { Algorithm } from '../comm/communicator.ts';
import { type Collective, collectiveTraffic } from '../comm/cost.ts';
import type { MeshCoords } from '../comm/mesh.ts';
import {
  microBatchSize,
  type ParallelPlan,
  planGroup,
  planMesh,
  type PlanModel,
  planWorldSize,
  rankParams,
  type StrategyKind,
  zeroWorkingElements,
} from './plan.ts';

/** Bytes per rank of parameters, gradients and optimizer state. */
export interface MemoryBytes {
  params: number;
  grads: number;
  optimizer: number;
  total: number;
}

const mem = (params: number, grads: number, optimizer: number): MemoryBytes => ({
  params,
  grads,
  optimizer,
  total: params + grads + optimizer,
});

function checkZero(psi: number, d: number, zero: number, what: string): void {
  if (!Number.isInteger(psi) || psi < 0 || !Number.isInteger(d) || d < 1 || ![0, 1, 2, 3].includes(zero)) {
    throw new Error(`${what}: need Ψ ≥ 0 and d ≥ 1 integers and zero in 0…3; got Ψ ${psi}, d ${d}, zero ${zero}`);
  }
}

/**
 * Memory per rank in this sandbox's pure-fp32 training (ZeRO, Rajbhandari et al., arXiv
 * 1910.02054, with fp32 everywhere): 4 bytes of parameter, 4 of gradient and 8 of AdamW
 * state (m, v) per parameter. Stage 1 shards the optimizer state, stage 2 also the
 * gradients, stage 3 also the parameters, over d ranks; a shard is ⌈Ψ/d⌉ elements (the flat
 * buffer padded to a multiple of d so reduce-scatter splits it evenly). Stages 2–3 add the
 * working buffers that hold `working` elements (plan.ts zeroWorkingElements: the resident
 * units plus one layer) of gathered gradients, and at stage 3 of gathered values (zero_units.ts).
 * @throws Error on a negative Ψ, d < 1 or a stage outside 0…3.
 */
export function zeroMemoryFp32(psi: number, d: number, zero: 0 | 1 | 2 | 3, working = 0): MemoryBytes {
  checkZero(psi, d, zero, 'zeroMemoryFp32');
  const shard = Math.ceil(psi / d);
  return mem(
    4 * (zero >= 3 ? shard + working : psi),
    4 * (zero >= 2 ? shard + working : psi),
    8 * (zero >= 1 ? shard : psi),
  );
}

/**
 * Predicted model-state bytes of `rank` under `plan` (fp32 AdamW, {@link zeroMemoryFp32}): its
 * dense parameters (plan.ts rankParams) sharded by the ZeRO stage over dp·cp, with ZeRO-2/3's
 * working buffers (plan.ts zeroWorkingElements), and its experts over the dp·cp/ep ranks that
 * hold the same ones. `paramElements` = dense + expert elements.
 */
export function rankMemory(
  plan: ParallelPlan,
  model: PlanModel,
  rank: number,
  bias = true,
): MemoryBytes & { paramElements: number } {
  const p = rankParams(plan, model, rank, bias), d = plan.dp * plan.cp;
  const dense = zeroMemoryFp32(p.dense, d, plan.zero, plan.zero >= 2 ? zeroWorkingElements(model, bias) : 0);
  const ex = zeroMemoryFp32(p.expert, d / plan.ep, plan.zero);
  return {
    ...mem(dense.params + ex.params, dense.grads + ex.grads, dense.optimizer + ex.optimizer),
    paramElements: p.dense + p.expert,
  };
}

/**
 * docs/design.md §19's mixed-precision formulas (ZeRO paper §5): fp16 parameters 2Ψ, fp16
 * gradients 2Ψ, k bytes of fp32 optimizer state per parameter (k = 12: master weights, m, v):
 * no ZeRO 16Ψ; ZeRO-1 4Ψ + kΨ/d; ZeRO-2 2Ψ + (2+k)Ψ/d; ZeRO-3 (4+k)Ψ/d (unrounded).
 * @throws Error on a negative Ψ, d < 1 or a stage outside 0…3.
 */
export function zeroMemoryMixed(psi: number, d: number, zero: 0 | 1 | 2 | 3, k = 12): MemoryBytes {
  checkZero(psi, d, zero, 'zeroMemoryMixed');
  return mem(2 * psi / (zero >= 3 ? d : 1), 2 * psi / (zero >= 2 ? d : 1), k * psi / (zero >= 1 ? d : 1));
}

/**
 * Share of a step the pipeline idles: (p−1)/(v·m + p−1) for p stages, m micro-batches and
 * v model chunks per rank (v = 1: GPipe and 1F1B, Huang et al. / Narayanan et al.; v > 1:
 * interleaved 1F1B shrinks the bubble v-fold). @throws Error on non-positive inputs.
 */
export function bubbleFraction(p: number, m: number, v = 1): number {
  if (![p, m, v].every((x) => Number.isInteger(x) && x >= 1)) {
    throw new Error(`bubbleFraction: p ${p}, m ${m}, v ${v} must be positive integers`);
  }
  return (p - 1) / (v * m + p - 1);
}

export type PlanDim = 'dp' | 'tp' | 'pp' | 'cp' | 'ep';

/** One kind of traffic of one rank in one optimizer step. */
export interface CommRow {
  dim: PlanDim;
  what: string;
  collective: Collective | 'send';
  algorithm: Algorithm | 'p2p';
  /** World ranks of the group (sender first for `send`). */
  group: number[];
  calls: number;
  /** Elements of one call's buffer (see the module doc); for `send` the message size. */
  n: number;
  /** Elements this rank sends over the step (4 bytes each). */
  elements: number;
  messages: number;
  /** False where the count depends on choices the formula cannot see (ZeRO-2/3 per-layer padding without the trainer's buckets). */
  exact: boolean;
}

/** Knobs of {@link stepTraffic}: collective algorithm (default ring), MoE routing, Linear biases. */
export interface TrafficOptions {
  algorithm?: 'ring' | 'recursive-doubling' | 'rabenseifner' | 'direct';
  topK?: number;
  capacityFactor?: number;
  bias?: boolean;
  /**
   * MoE layers are the blocks i with i % moeEvery = moeEvery − 1 (models/moe_layer.ts
   * isMoELayer; default 1: every block): they set the expert parameters and the all-to-alls.
   */
  moeEvery?: number;
  /**
   * Dense gradient buckets as the trainer calls them (elements of each call's buffer: the
   * allReduce vector, or the padded d·c_k of a ZeRO reduce-scatter / all-gather); absent: one
   * flat buffer of Ψ (padded to a multiple of the group for ZeRO).
   */
  buckets?: number[];
  /**
   * The trainer that will run the plan (plan.ts `strategyOf`): its small scalar allReduces follow
   * it (ep: 1-element expert norm over the EP group; mesh: 2-element [norm, loss] over the world
   * instead of the dp loss average and ZeRO's norm). Absent: only the dp loss average and ZeRO's
   * norm.
   */
  trainer?: StrategyKind;
}

/**
 * Every message `rank` sends in one optimizer step of `plan` (docs/design.md §17), one row per kind:
 * - dp: gradients synchronised over the dp·cp ranks that share parameters (Megatron's
 *   data-parallel group with context parallelism), per bucket: one allReduce (zero 0); a
 *   reduce-scatter (per micro-batch for zero 2) + one all-gather of the updated parameters
 *   (zero 1/2); all-gathers in forward and backward plus a reduce-scatter per micro-batch
 *   (zero 3) — as src/parallel/data_parallel.ts and zero.ts; plus the 1-element loss average
 *   (and ZeRO's 1-element gradient-norm sum), or the scalars of `o.trainer` (see TrafficOptions);
 *   expert parameters over the dp·cp/ep ranks holding the same experts; with pp > 1 the tied
 *   embedding's gradient is summed between the first and last stage.
 * - tp: per layer and micro-batch 4 allReduces of b·s·C (2 forward at the row-parallel
 *   outputs, 2 backward at the column-parallel inputs); with sp 4 all-gathers + 4
 *   reduce-scatters instead, plus one allReduce per step of the LayerNorm/bias gradients (and
 *   wpe's T·C on the first stage: rankParams `spReplicated`); the
 *   vocab-parallel embedding (1 forward), head input (1 backward) and cross-entropy (max,
 *   target logit, sum of exponentials: 3 allReduces of b·s) as in Megatron's tensor_parallel.
 * - pp: b·s·C (/tp under sp) per stage boundary per micro-batch, forward and backward.
 * - cp ring (ring_attention.ts), kv = 2·b·s·C/tp per layer per micro-batch: K,V sent cp−1
 *   times forward and again backward, plus the dK,dV accumulator cp times backward (the last
 *   hop returns it to its owner).
 * - cp Ulysses (ulysses.ts): per layer per micro-batch, forward and backward, one allToAll of
 *   the packed q,k,v (3·b·s·C/tp) and one of the attention output (b·s·C/tp).
 * - ep: dispatch + combine allToAlls of nExpert·capacity·C per MoE layer, forward and backward,
 *   capacity = ⌈capacityFactor·tokens·topK/nExpert⌉ (GShard / Switch Transformer buffers), over
 *   the EP group; the expert gradients (this rank's nExpert/ep experts of every MoE layer) are
 *   synchronised over the dp·cp/ep ranks holding the same experts (DeepSpeed-MoE's
 *   expert-data-parallel group; none when ep = dp).
 * b = batchSize/(dp·microBatches), s = blockSize/cp. The plan must be valid (validatePlan).
 */
export function stepTraffic(plan: ParallelPlan, model: PlanModel, rank: number, o: TrafficOptions = {}): CommRow[] {
  const algo = o.algorithm ?? 'ring', mesh = planMesh(plan), me = mesh.coords(rank), rows: CommRow[] = [];
  const { dp, pp: P, cp, tp: t, ep, zero, sp, microBatches: m, virtualStages: v } = plan;
  const C = model.nEmbd, b = microBatchSize(plan, model), s = model.blockSize / cp, L = model.nLayer / P;
  const par = rankParams(plan, model, rank, o.bias ?? true);
  // rankParams counts experts in every block; only this stage's MoE blocks (o.moeEvery) have them.
  const every = o.moeEvery ?? 1,
    moeLayers = [...Array(L).keys()].filter((i) => (me.pp * L + i) % every === every - 1).length;
  const expertParams = (par.expert / L) * moeLayers;
  const at = (c: Partial<MeshCoords>) => mesh.rankOf({ ...me, ...c });
  const push = (
    dim: PlanDim,
    what: string,
    coll: Collective,
    group: number[],
    n: number,
    calls: number,
    exact = true,
  ) => {
    if (group.length < 2 || calls === 0 || n === 0) return;
    const a: Algorithm = coll === 'allToAll' || (coll === 'reduceScatter' && algo === 'recursive-doubling')
      ? 'direct'
      : coll === 'allGather' && algo === 'rabenseifner'
      ? 'recursive-doubling'
      : algo;
    const tr = collectiveTraffic(coll, a, n, group.length, group.indexOf(rank));
    rows.push({
      dim,
      what,
      collective: coll,
      algorithm: a,
      group,
      calls,
      n,
      elements: tr.elements * calls,
      messages: tr.messages * calls,
      exact,
    });
  };
  const sends = (dim: PlanDim, what: string, group: number[], n: number, count: number, exact = true) => {
    if (count > 0 && n > 0) {
      rows.push({
        dim,
        what,
        collective: 'send',
        algorithm: 'p2p',
        group,
        calls: count,
        n,
        elements: n * count,
        messages: count,
        exact,
      });
    }
  };
  // dp: gradient synchronisation (and ZeRO's parameter gathers).
  const dpcp = (keep: (d: number) => boolean) =>
    [...Array(dp).keys()].filter(keep).flatMap((d) => [...Array(cp).keys()].map((c) => at({ dp: d, cp: c })));
  const sync = (what: string, group: number[], psi: number, buckets?: number[]) => {
    const d = group.length, calls = (buckets ?? [psi]).map((n) => ({ n, padded: buckets ? n : Math.ceil(n / d) * d }));
    for (const { n, padded } of calls) {
      if (zero === 0) push('dp', `${what} gradients`, 'allReduce', group, n, 1);
      else if (zero < 3) {
        // ZeRO-2 reduces per 'layer' unit, whose 256-byte padding the formula cannot see without the buckets.
        push(
          'dp',
          `${what} gradients (ZeRO-${zero})`,
          'reduceScatter',
          group,
          padded,
          zero === 2 ? m : 1,
          zero === 1 || !!buckets,
        );
        push('dp', `${what} parameters (ZeRO-${zero})`, 'allGather', group, padded, 1, zero === 1 || !!buckets);
      } else {
        push('dp', `${what} parameters, forward + backward (ZeRO-3)`, 'allGather', group, padded, 2 * m, !!buckets);
        push('dp', `${what} gradients (ZeRO-3)`, 'reduceScatter', group, padded, m, !!buckets);
      }
    }
  };
  const dpGroup = dpcp(() => true), trainer = o.trainer;
  // Scalar allReduces: each trainer sums its loss and gradient-norm shares its own way.
  if (trainer === 'mesh') {
    push('dp', 'gradient norm + loss over the world', 'allReduce', [...Array(planWorldSize(plan)).keys()], 2, 1);
  } else {
    push('dp', 'loss average', 'allReduce', dpGroup, 1, 1);
    if (zero > 0) push('dp', 'gradient norm (ZeRO)', 'allReduce', dpGroup, 1, 1);
  }
  if (trainer === 'ep') push('dp', 'expert gradient norm', 'allReduce', planGroup(plan, 'ep', rank), 1, 1);
  sync('dense', dpGroup, par.dense, o.buckets);
  sync('expert', dpcp((d) => d % ep === me.dp % ep), expertParams);
  if (P > 1 && (me.pp === 0 || me.pp === P - 1)) {
    push('pp', 'tied embedding gradients', 'allReduce', [at({ pp: 0 }), at({ pp: P - 1 })], par.embedding, 1);
  }
  // tp: Megatron's f/g operators, or sequence parallelism's all-gather / reduce-scatter.
  const tpGroup = mesh.group('tp', rank), bsh = b * s * C, first = me.pp === 0, last = me.pp === P - 1;
  if (!sp) {
    push('tp', 'layer outputs fwd + inputs bwd', 'allReduce', tpGroup, bsh, 4 * L * m);
    if (first) push('tp', 'vocab-parallel embedding (fwd)', 'allReduce', tpGroup, bsh, m);
    if (last) push('tp', 'LM head input (bwd)', 'allReduce', tpGroup, bsh, m);
  } else {
    push('tp', 'sequence-parallel gathers (2 fwd, 2 bwd per layer)', 'allGather', tpGroup, bsh, 4 * L * m);
    push('tp', 'sequence-parallel scatters (2 fwd, 2 bwd per layer)', 'reduceScatter', tpGroup, bsh, 4 * L * m);
    if (first) push('tp', 'embedding scatter (fwd)', 'reduceScatter', tpGroup, bsh, m);
    if (first) push('tp', 'embedding gather (bwd)', 'allGather', tpGroup, bsh, m);
    if (last) push('tp', 'LM head gather (fwd)', 'allGather', tpGroup, bsh, m);
    if (last) push('tp', 'LM head scatter (bwd)', 'reduceScatter', tpGroup, bsh, m);
    push('tp', 'LayerNorm and row-parallel bias gradients', 'allReduce', tpGroup, par.spReplicated, 1);
  }
  if (last) push('tp', 'vocab-parallel cross-entropy (max, target, sum-exp)', 'allReduce', tpGroup, b * s, 3 * m);
  // pp: activations forward, their gradients backward, for every local stage with a neighbour.
  const S = P * v, stages = [...Array(v).keys()].map((c) => c * P + me.pp), act = sp ? bsh / t : bsh;
  const ppGroup = mesh.group('pp', rank);
  sends('pp', 'activations (fwd)', ppGroup, act, m * stages.filter((st) => st < S - 1).length);
  sends('pp', 'activation gradients (bwd)', ppGroup, act, m * stages.filter((st) => st > 0).length);
  // cp: ring attention or Ulysses.
  const cpGroup = mesh.group('cp', rank), kv = 2 * b * s * (C / t);
  if (cp > 1 && plan.cpKind === 'ring') {
    sends('cp', 'ring attention K,V blocks (fwd)', cpGroup, kv, (cp - 1) * L * m);
    sends('cp', 'ring attention K,V blocks (bwd)', cpGroup, kv, (cp - 1) * L * m);
    sends('cp', 'ring attention dK,dV accumulators (bwd, last hop returns them)', cpGroup, kv, cp * L * m);
  } else if (cp > 1) {
    push('cp', 'Ulysses packed q, k, v (fwd + bwd)', 'allToAll', cpGroup, 3 * b * s * (C / t), 2 * L * m);
    push('cp', 'Ulysses attention output (fwd + bwd)', 'allToAll', cpGroup, b * s * (C / t), 2 * L * m);
  }
  // ep: MoE dispatch and combine.
  if (model.nExpert && ep > 1) {
    const E = model.nExpert, tokens = sp ? (b * s) / t : b * s;
    const cap = Math.ceil(((o.capacityFactor ?? 1.25) * tokens * (o.topK ?? 1)) / E);
    push(
      'ep',
      `MoE dispatch + combine (capacity ${cap})`,
      'allToAll',
      planGroup(plan, 'ep', rank),
      E * cap * C,
      4 * moeLayers * m,
    );
  }
  return rows;
}

/** Elements per parallel dimension and collective, summed over rows: `dp/allReduce` → elements. */
export function trafficByKind(rows: CommRow[]): Map<string, number> {
  const out = new Map<string, number>();
  for (const r of rows) out.set(`${r.dim}/${r.collective}`, (out.get(`${r.dim}/${r.collective}`) ?? 0) + r.elements);
  return out;
}
