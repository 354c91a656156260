/**
 * Analytical activation memory per rank (docs/design.md §19): the bytes of the tensors a rank's
 * autograd tapes hold at the moment most of them are alive, for THIS implementation (fp32,
 * 4 bytes per element, i32/u32 index buffers too), beside cost.ts's parameter / gradient /
 * optimizer bytes.
 *
 * Method: Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models"
 * (arXiv 2205.05198, §4): count, op by op, what one transformer layer keeps for its backward,
 * then scale by the micro-batches in flight. Their fp16 count with their layout is
 * sbh(34 + 5as/h) bytes per layer (s sequence, b micro-batch, h width, a heads), sbh(10 +
 * 24/t + 5as/(ht)) with tensor parallelism t and sbh/t·(34 + 5as/h) with sequence
 * parallelism; {@link korthikantiLayerBytes}. This sandbox's count differs because:
 * - fp32 everywhere (2× per element) and no dropout, so none of their 1-byte masks;
 * - FlashAttention (default) saves O and the log-sum-exp (a·s·b values) instead of the
 *   s×s softmax and its dropout output: no 5as/h term (`--attention naive` saves the s×s
 *   probabilities once: a·s²·b elements);
 * - the tape (src/autograd/tape.ts) frees nothing until the micro-batch's tape is disposed,
 *   so every op output counts, also those PyTorch frees early: the two row-parallel linear
 *   outputs feeding the residual adds (+2 sbh elements), LayerNorm's mean and rstd (4·sb),
 *   and the index the embedding backward reads (V+1 offsets and b·s positions);
 * - one GPT layer on one rank is therefore 18·sbh + (4 + a)·sb elements (their 16 + masks);
 * - the tensor-parallel rank (the model over rank_context.ts) keeps what its collectives produced:
 *   the f copies / SP all-gathers (2 full (N, C) per layer), the row-parallel partial sums
 *   before their allReduce / reduce-scatter (2 full), the reduced outputs, and with biases
 *   the ones-vector bias "linear" and its sum (row-parallel biases are added once, after
 *   the reduction). Sequence parallelism divides only the LayerNorm / residual / bias region
 *   by t: the gathered inputs and partial sums stay full-sized (Megatron re-gathers in
 *   backward instead of saving them).
 * - context parallelism divides the sequence s = T/cp everywhere (ring attention keeps O and
 *   LSE as flash does; Ulysses also keeps both all-to-all outputs, 3N·C/t and N·C/t).
 * Pipelines: a tape per (micro-batch, stage) lives from its forward (or its activation's
 * receive) to its backward, so the schedule (pipeline_schedule.ts) is walked action by
 * action and the peak taken; for 1F1B that is ≤ p micro-batches, for GPipe m
 * (`peakInFlight`). The non-pipeline trainers run micro-batches one after another: one tape.
 *
 * Not counted: parameters, gradients and optimizer state (cost.ts), activation gradients and
 * kernel workspaces that appear during backward, host copies (the vocab-parallel
 * cross-entropy keeps its logits on the host), and per-step buffers the trainers allocate
 * once (token / target tensors of the single-rank and ZeRO trainers). A measured
 * pool peak therefore exceeds this figure. GPT only (src/models/gpt.ts and the parallel
 * models built from it); other architectures throw.
 */
import {
  microBatchSize,
  type ParallelPlan,
  planMesh,
  type PlanModel,
  planWorldSize,
  type StrategyKind,
} from './plan.ts';
import { strategyOf } from './strategy.ts';
import type { Recompute } from '../models/recompute.ts';
import { makeSchedule, peakInFlight } from './pipeline_schedule.ts';
import {
  type ActivationItem,
  attentionItems,
  type Geo,
  gptEmbed,
  gptLayer,
  head,
  it,
  itemBytes,
  tpEmbed,
  tpLayer,
} from './activation_items.ts';

/** Knobs the plan does not carry (defaults: gpt, biases on, FlashAttention, the trainer strategyOf picks). */
export interface ActivationOptions {
  arch?: string;
  bias?: boolean;
  attention?: 'flash' | 'naive';
  trainer?: StrategyKind;
  /** Activation recomputation (src/models/recompute.ts); default none. */
  recompute?: Recompute;
}

/** The analytical activation memory of one rank. */
export interface ActivationMemory {
  /** The trainer whose model code is counted ('mesh' also for plans no trainer runs yet). */
  kind: StrategyKind;
  /** Peak bytes of live tape tensors (4 B per element). */
  bytes: number;
  /** The same with every allocation rounded up as the buffer pool does (src/gpu/pool.ts POOL_GRANULE). */
  pooledBytes: number;
  /** Forward tensors of one micro-batch through all of this rank's stages (bytes). */
  perMicroBatch: number;
  /** Most micro-batches (model chunks when interleaved) alive at once: pipeline_schedule.ts peakInFlight, else 1. */
  inFlight: number;
  /** One transformer layer of one micro-batch on this rank (bytes), comparable with {@link korthikantiLayerBytes}. */
  perLayer: number;
  /** What one micro-batch allocates per stage this rank holds (stage −1: a non-pipeline trainer's whole model). */
  stages: { stage: number; items: ActivationItem[] }[];
}

const raw = (items: ActivationItem[]) => itemBytes(items);
const pooled = (items: ActivationItem[]) => itemBytes(items, true);

/**
 * What one layer keeps for its backward under `mode` (docs/design.md §24), and the working set
 * one recomputed segment allocates again while its backward runs: none keeps every item; full
 * keeps the block's output copy (its input is the previous block's) and recomputes the block;
 * selective keeps the block but its attention core, whose output copy it keeps instead.
 */
function recomputed(
  g: Geo,
  tp: boolean,
  full: ActivationItem[],
  mode: Recompute,
): { layer: ActivationItem[]; work: ActivationItem[] } {
  const N = g.b * g.s, rows = tp && g.sp ? N / g.t : N, c = tp ? g.C / g.t : g.C;
  if (mode === 'full') return { layer: [it('recomputed block output', rows * g.C)], work: full };
  if (mode === 'none') return { layer: full, work: [] };
  const core = tp ? attentionItems(g, c, g.nh / g.t, false) : attentionItems(g, g.C, g.nh, g.naive),
    names = new Set(core.map((x) => x.what));
  return { layer: [...full.filter((x) => !names.has(x.what)), it('recomputed attention output', N * c)], work: core };
}

/** Korthikanti et al.'s per-layer bytes (fp16, dropout, softmax saved): sbh(34 + 5as/h), with tp t: sbh(10 + 24/t + 5as/(ht)), with sp: sbh/t·(34 + 5as/h). */
export function korthikantiLayerBytes(s: number, b: number, h: number, a: number, t = 1, sp = false): number {
  const sbh = s * b * h, att = (5 * a * s) / h;
  return sp ? (sbh / t) * (34 + att) : sbh * (10 + 24 / t + att / t);
}

/**
 * The analytical peak activation memory of `rank` under `plan` (see the module doc): the
 * trainer's model code (gpt.ts for dp / zero / single rank, context_parallel.ts for cp,
 * stages.ts for pp, the RankContext for tp, cp and the mesh) counted per micro-batch
 * of b = batchSize/(dp·m) rows of s = T/cp tokens, times what is in flight.
 * @throws Error for an architecture other than gpt, or an invalid plan (validatePlan's rules).
 */
export function activationMemory(
  plan: ParallelPlan,
  model: PlanModel,
  rank: number,
  o: ActivationOptions = {},
): ActivationMemory {
  const arch = o.arch ?? 'gpt';
  if (arch !== 'gpt') {
    throw new Error(
      `activation memory: the analytical count covers the GPT of src/models/gpt.ts only, got --arch ${arch}`,
    );
  }
  let kind = o.trainer;
  if (!kind) {
    try {
      kind = strategyOf(plan, arch);
    } catch {
      kind = 'mesh'; // a combination no trainer runs yet: count it as the mesh trainer composes it
    }
  }
  if (plan.ep > 1) {
    throw new Error('activation memory: expert parallelism runs gpt-moe, which the analytical count does not cover');
  }
  const g: Geo = {
    b: microBatchSize(plan, model),
    s: model.blockSize / plan.cp,
    T: model.blockSize,
    C: model.nEmbd,
    nh: model.nHead,
    V: model.vocabSize,
    t: plan.tp,
    sp: plan.sp,
    cp: plan.cp,
    cpKind: plan.cpKind,
    bias: o.bias ?? true,
    naive: o.attention === 'naive',
  };
  const L = model.nLayer, tp = kind === 'mesh' && plan.tp > 1; // tp 1: rank_context.ts runs the plain ops
  const full = tp ? tpLayer(g) : gptLayer(g), { layer, work } = recomputed(g, tp, full, o.recompute ?? 'none');
  const times = (items: ActivationItem[], k: number) => items.map((x) => ({ ...x, count: x.count * k }));
  // One rank (the single-rank Trainer) and the ZeRO trainer run the replica's forward on
  // uploaded token tensors; the mesh trainer's stages upload them on each micro-batch's tape.
  if (kind !== 'mesh' || planWorldSize(plan) === 1) {
    const items = [...(tp ? tpEmbed(g) : gptEmbed(g)), ...times(layer, L), ...head(g, tp, g.cp > 1)]; // cp uploads its targets in the head
    const bytes = raw(items) + raw(work);
    return {
      kind,
      bytes,
      pooledBytes: pooled(items) + pooled(work),
      perMicroBatch: bytes,
      inFlight: 1,
      perLayer: raw(layer),
      stages: [{ stage: -1, items }],
    };
  }
  // Pipelines: a tape per (micro, stage), from its input's arrival to its backward.
  const v = plan.schedule === 'interleaved' ? plan.virtualStages : 1,
    S = plan.pp * v,
    ppRank = planMesh(plan).coords(rank).pp;
  const sched = makeSchedule(plan.schedule, plan.pp, plan.microBatches, v);
  const N = g.b * g.s, input = [it('received activation', tp && g.sp ? (N / g.t) * g.C : N * g.C)];
  const stageItems = (s: number): ActivationItem[] => [
    ...(s === 0 ? (tp ? tpEmbed(g) : [...(g.cp > 1 ? [] : [it('token ids', N)]), ...gptEmbed(g)]) : []),
    ...times(layer, L / S),
    ...(s === S - 1 ? head(g, tp, true) : [it('send marker', 1)]),
  ];
  const stages = [...Array(v).keys()].map((c) => c * plan.pp + ppRank).map((stage) => ({
    stage,
    items: [...(stage > 0 ? input : []), ...stageItems(stage)],
  }));
  const live = new Map<string, ActivationItem[]>();
  let peakRaw = 0, peakPooled = 0;
  for (const a of sched.ranks[ppRank]) {
    const key = `${a.micro}:${a.stage}`;
    if (a.kind === 'recv-act' || (a.kind === 'forward' && a.stage > 0 && !live.has(key))) live.set(key, [...input]);
    if (a.kind === 'forward') live.set(key, [...(live.get(key) ?? []), ...stageItems(a.stage)]);
    if (a.kind === 'backward') live.delete(key);
    const now = [...live.values()].flat();
    peakRaw = Math.max(peakRaw, raw(now));
    peakPooled = Math.max(peakPooled, pooled(now));
  }
  // A recomputed segment's own activations live while its backward runs: one at a time.
  peakRaw += raw(work);
  peakPooled += pooled(work);
  return {
    kind,
    bytes: peakRaw,
    pooledBytes: peakPooled,
    perMicroBatch: stages.reduce((a, x) => a + raw(x.items), 0),
    inFlight: peakInFlight(sched)[ppRank],
    perLayer: raw(layer),
    stages,
  };
}

/** {@link activationMemory}'s peak bytes (4 B per element, unrounded). @throws as activationMemory. */
export const activationBytes = (
  plan: ParallelPlan,
  model: PlanModel,
  rank: number,
  o: ActivationOptions = {},
): number => activationMemory(plan, model, rank, o).bytes;
