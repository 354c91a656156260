/**
 * Analytical activation memory per rank (docs/design.md#memory-per-rank): the bytes of the tensors a rank's
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
 * once (the single-rank Trainer's token / target tensors). A measured
 * pool peak therefore exceeds this figure.
 *
 * Architectures: gpt (src/models/gpt.ts and the parallel models built from it; activation_items.ts)
 * and the recurrent ones (recurrent_items.ts): mamba, linear (either decay) and hybrid, whose
 * shapes come from the plan model's layout (arch_params.ts). Their layers are counted the same
 * way, op by op (RMSNorm keeps one statistic, rstd; the scan its chunk-entry states; the
 * head-decay linear attention its chunk states), and their item lists differ by layer only in the
 * hybrid (its shared attention block after every attnEvery-th layer), so a pipeline stage counts
 * the layers it holds. The MoE models (routed experts, data-dependent capacity) throw.
 */
import type { Autocast } from '../autograd/autocast.ts';
import {
  microBatchSize,
  type ParallelPlan,
  planMesh,
  type PlanModel,
  planWorldSize,
  type StrategyKind,
} from '../parallel/plan/plan.ts';
import { strategyOf } from '../parallel/plan/strategy.ts';
import type { Recompute } from '../models/recompute.ts';
import { makeSchedule, peakInFlight } from '../parallel/pipeline/pipeline_schedule.ts';
import {
  type ActivationItem,
  attentionItems,
  autocastItems,
  gptEmbed,
  gptLayer,
  head,
  it,
  itemBytes,
  tpEmbed,
  tpLayer,
} from './activation_items.ts';
import {
  linearCoreItems,
  linearLayer,
  mambaLayer,
  type RecGeo,
  recurrentEmbed,
  scanItems,
  sharedBlock,
  sharedCore,
} from './recurrent_items.ts';

/** Knobs the plan does not carry (defaults: gpt, biases on, FlashAttention, the trainer strategyOf picks). */
export interface ActivationOptions {
  arch?: string;
  bias?: boolean;
  attention?: 'flash' | 'naive';
  trainer?: StrategyKind;
  /** Activation recomputation (src/models/recompute.ts); default none. */
  recompute?: Recompute;
  /** Mixed precision (autograd/autocast.ts): the tapes also hold half precision copies; default none (f32). */
  autocast?: Autocast | null;
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
  /** Layer 0 of one micro-batch on this rank (bytes); for gpt comparable with {@link korthikantiLayerBytes}. */
  perLayer: number;
  /** What one micro-batch allocates per stage this rank holds (stage −1: a non-pipeline trainer's whole model). */
  stages: { stage: number; items: ActivationItem[] }[];
}

const raw = (items: ActivationItem[]) => itemBytes(items);
const pooled = (items: ActivationItem[]) => itemBytes(items, true);

/** The architectures counted; the MoE models (routed experts, per-token capacity) and recurrent-depth are not. */
const COVERED = ['gpt', 'mamba', 'hybrid', 'linear'];

/**
 * What layer i keeps for its backward under `mode` (docs/design.md#memory-per-rank), and the largest working
 * set one recomputed segment allocates again while its backward runs: none keeps every item;
 * full keeps the block's output copy (its input is the previous block's) and recomputes the
 * block (a hybrid block with the shared attention block after it); selective keeps the block
 * but its mixer cores (attention; Mamba's scan; the linear attention with its log-decays), whose
 * output copies it keeps instead.
 */
function layers(arch: string, g: RecGeo, tp: boolean, mode: Recompute, L: number, attnEvery: number) {
  const N = g.b * g.s, t = tp ? g.t : 1, c = g.C / t, rows = tp && g.sp ? N / g.t : N;
  const [main, core, coreOut] = arch === 'gpt'
    ? [tp ? tpLayer(g) : gptLayer(g), tp ? sharedCore(g, tp) : attentionItems(g, g.C, g.nh, g.naive), N * c]
    : arch === 'linear'
    ? [linearLayer(g, tp), linearCoreItems(g, g.nh / t, (g.decay === 'head' ? g.nh : g.C) / t), N * c]
    : [mambaLayer(g, tp), scanItems(g, g.D / t), (N * g.D) / t];
  const shared = (i: number) => arch === 'hybrid' && (i + 1) % attnEvery === 0;
  const anyShared = [...Array(L).keys()].some(shared), sb = anyShared ? sharedBlock(g, tp) : [];
  const drop = (items: ActivationItem[], cut: ActivationItem[], out: ActivationItem) => {
    const names = new Set(cut.map((x) => x.what));
    return [...items.filter((x) => !names.has(x.what)), out];
  };
  if (mode === 'full') return { at: () => [it('recomputed block output', rows * g.C)], work: [...main, ...sb] };
  if (mode === 'none') return { at: (i: number) => (shared(i) ? [...main, ...sb] : main), work: [] };
  const kept = drop(
      main,
      core,
      it(arch === 'gpt' ? 'recomputed attention output' : 'recomputed mixer output', coreOut),
    ),
    keptShared = anyShared ? drop(sb, sharedCore(g, tp), it('recomputed attention output', N * c)) : [],
    work = anyShared && raw(sharedCore(g, tp)) > raw(core) ? sharedCore(g, tp) : core;
  return { at: (i: number) => (shared(i) ? [...kept, ...keptShared] : kept), work };
}

/** Layers [from, to)'s items, equal items merged into one with their counts summed. */
function merged(at: (i: number) => ActivationItem[], from: number, to: number): ActivationItem[] {
  const out = new Map<string, ActivationItem>();
  for (let i = from; i < to; i++) {
    for (const x of at(i)) {
      const key = `${x.what}|${x.elements}`, had = out.get(key);
      out.set(key, had ? { ...had, count: had.count + x.count } : { ...x });
    }
  }
  return [...out.values()];
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
 * @throws Error for a MoE architecture, a recurrent one without `model.layout`, expert parallelism, or an
 *   invalid plan (validatePlan's rules).
 */
export function activationMemory(
  plan: ParallelPlan,
  model: PlanModel,
  rank: number,
  o: ActivationOptions = {},
): ActivationMemory {
  const arch = o.arch ?? 'gpt', lay = model.layout;
  if (!COVERED.includes(arch)) {
    throw new Error(
      `activation memory: the analytical count covers ${COVERED.join(', ')}, not the MoE models' routed experts${
        arch === 'recurrent-depth'
          ? ' nor a core iterated r times, its last k kept (docs/design.md#recurrent-depth)'
          : ''
      }; got --arch ${arch}`,
    );
  }
  if (arch !== 'gpt' && lay?.arch !== arch) {
    throw new Error(`activation memory: --arch ${arch} needs its layout (arch_params.ts archLayout) in the plan model`);
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
  const g: RecGeo = {
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
    D: (lay?.expand ?? 0) * model.nEmbd,
    R: lay?.dtRank ?? 0,
    Ns: lay?.dState ?? 0,
    decay: lay?.decay ?? 'head',
  };
  const L = model.nLayer, tp = plan.tp > 1; // tp 1: rank_context.ts runs the plain ops
  const base = layers(arch, g, tp, o.recompute ?? 'none', L, lay?.attnEvery ?? 1), { work } = base;
  const half = autocastItems(o.autocast ?? null, arch, plan, o.recompute ?? 'none', g);
  const at = (i: number) => [...base.at(i), ...half.layer], layer = at(0);
  const gpt = arch === 'gpt', embed = gpt ? (tp ? tpEmbed(g) : gptEmbed(g)) : recurrentEmbed(g, tp);
  // One rank (the single-rank Trainer) runs the model's forward on uploaded token tensors; a rank
  // model's stages (the mesh trainer, every plan) upload them on each micro-batch's tape.
  const replica = planWorldSize(plan) === 1;
  if (replica) {
    const items = [...embed, ...merged(at, 0, L), ...head(g, tp, g.cp > 1, !gpt), ...half.head]; // cp uploads its targets in the head
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
    ...(s === 0 ? (tp ? embed : [...(g.cp > 1 ? [] : [it('token ids', N)]), ...embed]) : []),
    ...merged(at, (s * L) / S, ((s + 1) * L) / S), // pipeline_stage.ts stageLayers
    ...(s === S - 1 ? [...head(g, tp, true, !gpt), ...half.head] : [it('send marker', 1)]),
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
