/**
 * Analytical communication of a parallel plan for a GPT known only by its shape (a plan preset, the demo's Learn
 * panels): the per-step traffic by parallel dimension ({@link stepTraffic}, the table of
 * docs/design.md#communication-per-optimizer-step); one call's is src/comm/cost.ts's. A config's traffic is counted
 * from its model instead (derived_rows.ts derivedTraffic), and tests hold the two equal on GPT plans.
 *
 * Units: elements (one f32 = 4 bytes), bytes. `n` is the element count of the buffer a call is
 * made with (src/comm/cost.ts's convention).
 */
import type { Algorithm } from '../../comm/call_options.ts';
import { type Collective, collectiveTraffic } from '../../comm/cost.ts';
import type { MeshCoords } from '../../comm/mesh.ts';
import {
  microBatchSize,
  type ParallelPlan,
  planGroup,
  planMesh,
  type PlanModel,
  planWorldSize,
  rankParams,
} from '../plan/plan.ts';
import { compressRows } from './compressed_rows.ts';
import { outerSyncRows } from '../data/low_comm.ts';
import type { CommRow, PlanDim, TrafficOptions } from './cost_types.ts';

export type { CommRow, PlanDim, TrafficOptions } from './cost_types.ts';

/**
 * Every message `rank` sends in one optimizer step of `plan` (docs/design.md#communication-per-optimizer-step), one row
 * per kind:
 * - dp: gradients synchronised over the dp·cp ranks that share parameters (Megatron's
 *   data-parallel group with context parallelism), per bucket: one allReduce (zero 0); a
 *   reduce-scatter (per micro-batch for zero 2) + one all-gather of the updated parameters
 *   (zero 1/2); all-gathers in forward and backward plus a reduce-scatter per micro-batch
 *   (zero 3) — as src/parallel/data/grad_sync.ts and zero_sync.ts; plus the 1-element loss average
 *   (and ZeRO's 1-element gradient-norm sum), or the scalars of `o.trainer` (see TrafficOptions);
 *   expert parameters over the dp·cp/ep ranks holding the same experts; with pp > 1 the tied
 *   embedding's gradient is summed between the first and last stage.
 * - tp: per layer and micro-batch 4 allReduces of b·s·C (2 forward at the row-parallel
 *   outputs, 2 backward at the column-parallel inputs; a MoE block's replicated MLP none); with sp 4 all-gathers + 4
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
 * b = batchSize/(dp·microBatches), s = blockSize/cp. The plan must be valid (plan/rules.ts checkPlan).
 * @throws Error for a plan model of another architecture (`model.layout`): count its config instead.
 */
export function stepTraffic(plan: ParallelPlan, model: PlanModel, rank: number, o: TrafficOptions = {}): CommRow[] {
  if (model.layout) {
    throw new Error(
      `stepTraffic: the analytical model counts a GPT of the plan model's shape, not --arch ${model.layout.arch}; count a config's traffic from its model (derived_rows.ts derivedTraffic)`,
    );
  }
  const algo = o.algorithm ?? 'ring', mesh = planMesh(plan), me = mesh.coords(rank), rows: CommRow[] = [];
  const { dp, pp: P, cp, tp: t, ep, zero, sp, microBatches: m, virtualStages: v } = plan;
  const C = model.nEmbd, b = microBatchSize(plan, model), s = model.blockSize / cp, L = model.nLayer / P;
  const par = rankParams(plan, model, rank, o.bias ?? true);
  // This stage's MoE blocks (models/moe_layer.ts isMoELayer) make the all-to-alls.
  const every = o.moeEvery ?? model.moeEvery ?? 1,
    moeLayers = [...Array(L).keys()].filter((i) => (me.pp * L + i) % every === every - 1).length;
  // rankParams counts this stage's experts from the model of the shape (derived_params.ts).
  const expertParams = par.expert;
  const at = (c: Partial<MeshCoords>) => mesh.rankOf({ ...me, ...c });
  const push = (
    dim: PlanDim,
    what: string,
    coll: Collective,
    group: number[],
    n: number,
    calls: number,
    exact = true,
    bulk?: CommRow['bulk'],
  ) => {
    if (group.length < 2 || calls === 0 || n === 0) return;
    const a = callAlgorithm(coll, algo), tr = collectiveTraffic(coll, a, n, group.length, group.indexOf(rank));
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
      ...(bulk && { bulk }),
    });
  };
  // Activation traffic (the trace's bulk kind): a row as push writes it, exact unless told otherwise.
  const bulk = (dim: PlanDim, what: string, coll: Collective, group: number[], n: number, calls: number) =>
    push(dim, what, coll, group, n, calls, true, 'act');
  const sends = (dim: PlanDim, what: string, group: number[], n: number, count: number) => {
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
        exact: true,
        bulk: 'act',
      });
    }
  };
  // dp: gradient synchronisation (and ZeRO's parameter gathers).
  const dpcp = (keep: (d: number) => boolean) =>
    [...Array(dp).keys()].filter(keep).flatMap((d) => [...Array(cp).keys()].map((c) => at({ dp: d, cp: c })));
  const sync = (what: 'dense' | 'expert', group: number[], psi: number, buckets?: number[]) => {
    const d = group.length, calls = (buckets ?? [psi]).map((n) => ({ n, padded: buckets ? n : Math.ceil(n / d) * d }));
    for (const { n, padded } of calls) {
      if (zero === 0) push('dp', `${what} gradients`, 'allReduce', group, n, 1, true, what);
      else if (zero < 3) {
        // ZeRO-2 reduces per 'layer' unit, whose 256-byte padding the formula cannot see without the buckets.
        const exact = zero === 1 || !!buckets, label = `${what} gradients (ZeRO-${zero})`;
        push('dp', label, 'reduceScatter', group, padded, zero === 2 ? m : 1, exact, what);
        push('dp', `${what} parameters (ZeRO-${zero})`, 'allGather', group, padded, 1, exact);
      } else {
        push('dp', `${what} parameters, forward + backward (ZeRO-3)`, 'allGather', group, padded, 2 * m, !!buckets);
        push('dp', `${what} gradients (ZeRO-3)`, 'reduceScatter', group, padded, m, !!buckets, what);
      }
    }
  };
  const dpGroup = dpcp(() => true), trainer = o.trainer;
  // Scalar allReduces: each trainer sums its loss and gradient-norm shares its own way.
  if (trainer === 'mesh') {
    // With --sync each dp worker's own norm has a slot (mesh_trainer.ts).
    const scalars = plan.sync ? dp + 1 : 2, world = [...Array(planWorldSize(plan)).keys()];
    push('dp', 'gradient norm + loss over the world', 'allReduce', world, scalars, 1);
  } else {
    push('dp', 'loss average', 'allReduce', dpGroup, 1, 1);
    if (zero > 0) push('dp', 'gradient norm (ZeRO)', 'allReduce', dpGroup, 1, 1);
  }
  // Without ep the experts are replicated like every other parameter and sync with them.
  if (!plan.sync) sync('dense', dpGroup, par.dense + (ep > 1 ? 0 : expertParams), o.buckets);
  if (ep > 1) sync('expert', dpcp((d) => d % ep === me.dp % ep), expertParams, o.expertBuckets);
  if (P > 1 && (me.pp === 0 || me.pp === P - 1)) {
    // ZeRO-2/3 sum the rank's reduced piece of wte's own unit, c = ⌈E/(64·d)⌉·64 (zero_sync.ts).
    const d = dpGroup.length, n = zero >= 2 ? Math.ceil(par.embedding / (64 * d)) * 64 : par.embedding;
    push('pp', 'tied embedding gradients', 'allReduce', [at({ pp: 0 }), at({ pp: P - 1 })], n, 1);
  }
  // tp: Megatron's f/g operators, or sequence parallelism's all-gather / reduce-scatter.
  const tpGroup = mesh.group('tp', rank), bsh = b * s * C, first = me.pp === 0, last = me.pp === P - 1;
  const again = o.recompute === 'full' ? L * m : 0;
  // gpt-moe: a MoE block's MLP is the replicated MoE sub-layer, with no tp collective of its own.
  const moeBlocks = model.nExpert ? moeLayers : 0;
  // One per row-parallel output forward and column-parallel input backward, the forward's
  // again when recomputed; a MoE block's MLP (replicated experts) has neither. Under sp each
  // allReduce is an all-gather and a reduce-scatter.
  const outs = (4 * L - 2 * moeBlocks) * m, redo = again ? (2 * L - moeBlocks) * m : 0;
  const colls: [Collective, string, string][] = sp
    ? [
      ['allGather', 'sequence-parallel gathers (2 fwd, 2 bwd per layer)', 'recomputed sequence-parallel gathers (bwd)'],
      [
        'reduceScatter',
        'sequence-parallel scatters (2 fwd, 2 bwd per layer)',
        'recomputed sequence-parallel scatters (bwd)',
      ],
    ]
    : [['allReduce', 'layer outputs fwd + inputs bwd', 'recomputed layer outputs (bwd)']];
  for (const [coll, what, again] of colls) {
    bulk('tp', what, coll, tpGroup, bsh, outs);
    bulk('tp', again, coll, tpGroup, bsh, redo);
  }
  if (!sp) {
    if (first) bulk('tp', 'vocab-parallel embedding (fwd)', 'allReduce', tpGroup, bsh, m);
    if (last) bulk('tp', 'LM head input (bwd)', 'allReduce', tpGroup, bsh, m);
  } else {
    if (first) bulk('tp', 'embedding scatter (fwd)', 'reduceScatter', tpGroup, bsh, m);
    if (first) bulk('tp', 'embedding gather (bwd)', 'allGather', tpGroup, bsh, m);
    if (last) bulk('tp', 'LM head gather (fwd)', 'allGather', tpGroup, bsh, m);
    if (last) bulk('tp', 'LM head scatter (bwd)', 'reduceScatter', tpGroup, bsh, m);
    if (zero < 2) push('tp', 'LayerNorm and row-parallel bias gradients', 'allReduce', tpGroup, par.spReplicated, 1);
    else if (!o.spBuckets) {
      push('tp', 'sp partial gradients per ZeRO unit', 'allReduce', tpGroup, par.spReplicated, m, false);
    } // ZeRO-2/3 sum each unit's partials before its reduce-scatter, every micro-batch.
    else for (const n of o.spBuckets) push('tp', 'sp partial gradients of a ZeRO unit', 'allReduce', tpGroup, n, m);
  }
  if (last) push('tp', 'vocab-parallel cross-entropy (max, target, sum-exp)', 'allReduce', tpGroup, b * s, 3 * m);
  // pp: activations forward, their gradients backward, for every local stage with a neighbour.
  const S = P * v, stages = [...Array(v).keys()].map((c) => c * P + me.pp), act = sp ? bsh / t : bsh;
  const ppGroup = mesh.group('pp', rank);
  sends('pp', 'activations (fwd)', ppGroup, act, m * stages.filter((st) => st < S - 1).length);
  sends('pp', 'activation gradients (bwd)', ppGroup, act, m * stages.filter((st) => st > 0).length);
  // ZeRO-2/3 sum the rank's reduced pieces of the shared block's units (zero_pieces.ts sumPieces).
  const shared = zero < 2 ? par.shared ?? 0 : o.sharedPieces ?? Math.ceil((par.shared ?? 0) / (64 * dp * cp)) * 64;
  const what = 'shared block gradients (every stage holds it)', exact = zero < 2 || !!o.sharedPieces;
  if (P > 1) push('pp', what, 'allReduce', ppGroup, shared, 1, exact);
  // cp: ring attention or Ulysses, once per block application (recurrent depth: every iteration);
  // recomputation re-runs the attention of every forward application (full) or of the recorded ones (selective).
  const cpGroup = mesh.group('cp', rank), kv = 2 * b * s * (C / t);
  const redoAttn = (o.recompute === 'full' || o.recompute === 'selective' ? L : 0) * m;
  if (cp > 1 && plan.cpKind === 'ring') {
    sends('cp', 'ring attention K,V blocks (fwd)', cpGroup, kv, (cp - 1) * L * m);
    sends('cp', 'ring attention K,V blocks (bwd)', cpGroup, kv, (cp - 1) * L * m);
    sends('cp', 'ring attention dK,dV accumulators (bwd, last hop returns them)', cpGroup, kv, cp * L * m);
    sends('cp', 'recomputed ring attention K,V blocks (bwd)', cpGroup, kv, (cp - 1) * redoAttn);
  } else if (cp > 1) {
    const qkv = 3 * b * s * (C / t), y = b * s * (C / t);
    bulk('cp', 'Ulysses packed q, k, v (fwd + bwd)', 'allToAll', cpGroup, qkv, 2 * L * m);
    bulk('cp', 'Ulysses attention output (fwd + bwd)', 'allToAll', cpGroup, y, 2 * L * m);
    bulk('cp', 'recomputed Ulysses packed q, k, v (bwd)', 'allToAll', cpGroup, qkv, redoAttn);
    bulk('cp', 'recomputed Ulysses attention output (bwd)', 'allToAll', cpGroup, y, redoAttn);
  }
  // ep: MoE dispatch and combine.
  if (model.nExpert && ep > 1) {
    const E = model.nExpert, tokens = sp ? (b * s) / t : b * s;
    const cap = Math.ceil(((o.capacityFactor ?? 1.25) * tokens * (o.topK ?? 1)) / E);
    bulk(
      'ep',
      `MoE dispatch + combine (capacity ${cap})`,
      'allToAll',
      planGroup(plan, 'ep', rank),
      E * cap * C,
      4 * moeLayers * m,
    );
  }
  if (plan.sync) rows.push(...outerSyncRows(plan.sync, par.dense, dpGroup, rank)); // low_comm.ts, every H steps
  return compressRows(rows, plan.compress, rank, o.gradMatrices);
}

/**
 * The algorithm a call of `coll` runs when a plan prices its collectives with `algo`: the nearest one the collective
 * accepts (comm/call_options.ts ALGORITHMS; an all-to-all is always direct).
 */
export function callAlgorithm(coll: Collective, algo: TrafficOptions['algorithm'] & string): Algorithm {
  if (coll === 'allToAll' || (coll === 'reduceScatter' && algo === 'recursive-doubling')) return 'direct';
  return coll === 'allGather' && algo === 'rabenseifner' ? 'recursive-doubling' : algo;
}

/** Elements per parallel dimension and collective, summed over rows: `dp/allReduce` → elements. */
export function trafficByKind(rows: CommRow[]): Map<string, number> {
  const out = new Map<string, number>();
  for (const r of rows) out.set(`${r.dim}/${r.collective}`, (out.get(`${r.dim}/${r.collective}`) ?? 0) + r.elements);
  return out;
}
