/**
 * Closed-form traffic of one rank per parallel dimension (docs/design.md#a-performance-model-that-chooses-the-plan),
 * for the plan search: the same calls as src/parallel/cost/cost.ts stepTraffic (GPT layout, the mesh trainer, no
 * compression, one flat gradient buffer) but from the rank's coordinates by arithmetic — no group lists, no mesh — so a
 * 1024-rank plan costs microseconds. tests/perf/dim_traffic.test.ts checks it against stepTraffic rank by rank on small
 * plans; a change to one must reach both.
 *
 * Units: elements (n, per call) and link spans in ranks.
 */
import { type Collective, collectiveTraffic } from '../comm/cost.ts';
import { type ParallelPlan, type PlanModel, planWorldSize, rankParams } from '../parallel/plan/plan.ts';
import type { PlanDim } from '../parallel/cost/cost.ts';
import type { Recompute } from '../models/recompute.ts';

/** One kind of call of one rank in one optimizer step. */
export interface DimCall {
  dim: PlanDim;
  what: string;
  collective: Collective | 'send';
  /** Elements of one call's buffer (cost.ts's convention); for a send, the message. */
  n: number;
  calls: number;
  /** Group size and this rank's index in it (a send: 2 and 0). */
  p: number;
  index: number;
  /** Largest world-rank distance inside the group: the group stays in a node when span < ranks per node. */
  span: number;
}

/** Mesh coordinates of `rank` on [dp, pp, cp, tp] (tp fastest, as src/comm/mesh.ts). */
export function coordsOf(plan: ParallelPlan, rank: number) {
  const { pp: P, cp, tp: t } = plan;
  return {
    tp: rank % t,
    cp: Math.floor(rank / t) % cp,
    pp: Math.floor(rank / (t * cp)) % P,
    dp: Math.floor(rank / (t * cp * P)),
  };
}

/** The world rank at coordinates `c` (inverse of {@link coordsOf}). */
export const rankOfCoords = (plan: ParallelPlan, c: { dp: number; pp: number; cp: number; tp: number }) =>
  ((c.dp * plan.pp + c.pp) * plan.cp + c.cp) * plan.tp + c.tp;

/**
 * Every call `rank` makes in one optimizer step of a valid `plan` (plan/rules.ts checkPlan) for a GPT
 * `model` without experts, as stepTraffic with `{ trainer: 'mesh', recompute }` counts them.
 * @throws Error for a MoE model or ep > 1 (the search prices dense models only).
 */
export function dimCalls(plan: ParallelPlan, model: PlanModel, rank: number, recompute: Recompute): DimCall[] {
  if (model.nExpert || model.layout || plan.ep > 1) {
    throw new Error('dimCalls: the closed form covers dense GPT models (no experts, ep 1)');
  }
  const { dp, pp: P, cp, tp: t, zero, sp, microBatches: m, virtualStages: v } = plan;
  const me = coordsOf(plan, rank), out: DimCall[] = [];
  const C = model.nEmbd, b = model.batchSize / (dp * m), s = model.blockSize / cp, L = model.nLayer / P;
  const bsh = b * s * C, first = me.pp === 0, last = me.pp === P - 1, par = rankParams(plan, model, rank);
  const add = (dim: PlanDim, what: string, collective: DimCall['collective'], n: number, calls: number, g: Group) => {
    if (g.p >= 2 && calls > 0 && n > 0) out.push({ dim, what, collective, n, calls, ...g });
  };
  type Group = { p: number; index: number; span: number };
  const d = dp * cp, dpGroup: Group = { p: d, index: me.dp * cp + me.cp, span: (dp - 1) * P * cp * t + (cp - 1) * t };
  const world = planWorldSize(plan);
  add('dp', 'gradient norm + loss over the world', 'allReduce', 2, 1, { p: world, index: rank, span: world - 1 });
  const padded = Math.ceil(par.dense / d) * d;
  if (zero === 0) add('dp', 'dense gradients', 'allReduce', par.dense, 1, dpGroup);
  else if (zero < 3) {
    add('dp', `dense gradients (ZeRO-${zero})`, 'reduceScatter', padded, zero === 2 ? m : 1, dpGroup);
    add('dp', `dense parameters (ZeRO-${zero})`, 'allGather', padded, 1, dpGroup);
  } else {
    add('dp', 'dense parameters, forward + backward (ZeRO-3)', 'allGather', padded, 2 * m, dpGroup);
    add('dp', 'dense gradients (ZeRO-3)', 'reduceScatter', padded, m, dpGroup);
  }
  if (P > 1 && (first || last)) {
    const n = zero >= 2 ? Math.ceil(par.embedding / (64 * d)) * 64 : par.embedding;
    add('pp', 'tied embedding gradients', 'allReduce', n, 1, { p: 2, index: first ? 0 : 1, span: (P - 1) * cp * t });
  }
  const tpG: Group = { p: t, index: me.tp, span: t - 1 };
  const again = recompute === 'full' ? L * m : 0, core = recompute !== 'none' ? L * m : 0;
  if (!sp) {
    add('tp', 'layer outputs fwd + inputs bwd', 'allReduce', bsh, 4 * L * m + 2 * again, tpG);
    add(
      'tp',
      'vocab-parallel embedding (fwd), LM head input (bwd)',
      'allReduce',
      bsh,
      (first ? m : 0) + (last ? m : 0),
      tpG,
    );
  } else {
    const ends = (first ? m : 0) + (last ? m : 0);
    add('tp', 'sequence-parallel gathers', 'allGather', bsh, 4 * L * m + 2 * again + ends, tpG);
    add('tp', 'sequence-parallel scatters', 'reduceScatter', bsh, 4 * L * m + 2 * again + ends, tpG);
    add('tp', 'LayerNorm and row-parallel bias gradients', 'allReduce', par.spReplicated, zero < 2 ? 1 : m, tpG);
  }
  if (last) add('tp', 'vocab-parallel cross-entropy', 'allReduce', b * s, 3 * m, tpG);
  const S = P * v, stages = [...Array(v).keys()].map((c) => c * P + me.pp), act = sp ? bsh / t : bsh;
  const ppSend: Group = { p: 2, index: 0, span: P > 1 ? (P - 1) * cp * t : 0 };
  add('pp', 'activations (fwd)', 'send', act, m * stages.filter((st) => st < S - 1).length, ppSend);
  add('pp', 'activation gradients (bwd)', 'send', act, m * stages.filter((st) => st > 0).length, ppSend);
  const cpG: Group = { p: cp, index: me.cp, span: (cp - 1) * t }, kv = 2 * b * s * (C / t);
  if (cp > 1 && plan.cpKind === 'ring') {
    const send = { ...cpG, p: 2, index: 0 };
    add('cp', 'ring attention K,V blocks (fwd + bwd, recomputed)', 'send', kv, (cp - 1) * (2 * L * m + core), send);
    add('cp', 'ring attention dK,dV accumulators (bwd)', 'send', kv, cp * L * m, send);
  } else if (cp > 1) {
    add('cp', 'Ulysses packed q, k, v', 'allToAll', 3 * b * s * (C / t), 2 * L * m + core, cpG);
    add('cp', 'Ulysses attention output', 'allToAll', b * s * (C / t), 2 * L * m + core, cpG);
  }
  return out;
}

/** The algorithm cost.ts prices a collective with under `algorithm` ring (all-to-all: direct). */
const algoOf = (c: Collective) => (c === 'allToAll' ? 'direct' : 'ring');

/** Elements `call` sends over the step, exactly as src/comm/cost.ts collectiveTraffic counts them (O(p)). */
export function exactElements(call: DimCall): number {
  if (call.collective === 'send') return call.n * call.calls;
  return collectiveTraffic(call.collective, algoOf(call.collective), call.n, call.p, call.index).elements * call.calls;
}

/** Elements `call` sends over the step, ring's share without chunk rounding (O(1), for the search). */
export function approxElements(call: DimCall): number {
  const { n, p, calls } = call;
  if (call.collective === 'send') return n * calls;
  return (call.collective === 'allReduce' ? (2 * (p - 1)) / p : (p - 1) / p) * n * calls;
}

/** Elements per dimension, summed over `calls` with `count` (exactElements or approxElements). */
export function elementsByDim(calls: DimCall[], count = approxElements): Record<PlanDim, number> {
  const out: Record<PlanDim, number> = { dp: 0, tp: 0, pp: 0, cp: 0, ep: 0 };
  for (const c of calls) out[c.dim] += count(c);
  return out;
}
