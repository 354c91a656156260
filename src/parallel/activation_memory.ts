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
 * once (token / target tensors of the single-rank and data-parallel trainers). A measured
 * pool peak therefore exceeds this figure. GPT only (src/models/gpt.ts and the parallel
 * models built from it); other architectures throw.
 */
import {
  microBatchSize,
  paddedVocab,
  type ParallelPlan,
  planMesh,
  type PlanModel,
  type StrategyKind,
  strategyOf,
} from './plan.ts';
import { makeSchedule, peakInFlight } from './pipeline_schedule.ts';
import { POOL_GRANULE } from '../gpu/pool.ts';

/** `count` allocations of `elements` 4-byte values each. */
export interface ActivationItem {
  what: string;
  elements: number;
  count: number;
}

/** Knobs the plan does not carry (defaults: gpt, biases on, FlashAttention, the trainer strategyOf picks). */
export interface ActivationOptions {
  arch?: string;
  bias?: boolean;
  attention?: 'flash' | 'naive';
  trainer?: StrategyKind;
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

const it = (what: string, elements: number, count = 1): ActivationItem => ({ what, elements, count });
/** Bytes of `items` at 4 B per element; `pooled`: each allocation rounded up as src/gpu/pool.ts does. */
export const itemBytes = (items: ActivationItem[], pooled = false): number =>
  items.reduce(
    (a, x) =>
      a +
      x.count *
        (pooled ? Math.max(POOL_GRANULE, Math.ceil((4 * x.elements) / POOL_GRANULE) * POOL_GRANULE) : 4 * x.elements),
    0,
  );
const raw = (items: ActivationItem[]) => itemBytes(items);
const pooled = (items: ActivationItem[]) => itemBytes(items, true);

/** One rank's view of a micro-batch: b rows of s tokens, width C, nh heads, tp degree t. */
interface Geo {
  b: number;
  s: number;
  T: number;
  C: number;
  nh: number;
  V: number;
  t: number;
  sp: boolean;
  cp: number;
  cpKind: 'ring' | 'ulysses';
  bias: boolean;
  naive: boolean;
}

/** Attention's saved tensors for width c and heads nh on this rank (N = b·s rows). */
function attentionItems(g: Geo, c: number, nh: number, naive: boolean): ActivationItem[] {
  const N = g.b * g.s;
  if (g.cp > 1 && g.cpKind === 'ulysses') {
    return [
      it('Ulysses q,k,v all-to-all output', 3 * N * c),
      it('attention output O (heads split)', N * c),
      it('attention log-sum-exp', N * nh),
      it('Ulysses output all-to-all', N * c),
    ];
  }
  if (naive && g.cp === 1) {
    return [it('attention output', N * c), it('attention probabilities (T×T)', g.b * nh * g.s * g.s)];
  }
  return [
    it(g.cp > 1 ? 'ring attention output O' : 'flash attention output O', N * c),
    it('attention log-sum-exp', N * nh),
  ];
}

/** One block of gpt.ts (also pipeline_stage.ts and context_parallel.ts, which repeat its op order). */
function gptLayer(g: Geo): ActivationItem[] {
  const N = g.b * g.s, C = g.C;
  return [
    it('ln_1, ln_2 outputs', N * C, 2),
    it('LayerNorm mean, rstd', N, 4),
    it('c_attn output q,k,v', 3 * N * C),
    ...attentionItems(g, C, g.nh, g.naive),
    it('attn c_proj output', N * C),
    it('residual sums', N * C, 2),
    it('c_fc output, GELU output', 4 * N * C, 2),
    it('mlp c_proj output', N * C),
  ];
}

/** One gpt.ts block over a tensor-parallel RankContext (rank_context.ts) on tp rank (Nl = N/t rows under sp). */
function tpLayer(g: Geo): ActivationItem[] {
  const N = g.b * g.s,
    C = g.C,
    t = g.t,
    Nl = g.sp ? N / t : N,
    out: ActivationItem[] = [it('ln_1, ln_2 outputs', Nl * C, 2), it('LayerNorm mean, rstd', Nl, 4)];
  if (t > 1) out.push(it(g.sp ? 'sequence-parallel all-gather outputs' : 'f (copy to tp region) outputs', N * C, 2));
  out.push(
    it('c_attn output q,k,v (heads / tp)', (3 * N * C) / t),
    ...attentionItems(g, C / t, g.nh / t, false),
    it('row-parallel partial sums', N * C, 2),
  );
  if (t > 1) out.push(it(g.sp ? 'reduce-scatter outputs' : 'allReduce outputs', Nl * C, 2));
  if (g.bias) out.push(it('bias ones column', Nl, 2), it('bias rows', Nl * C, 2), it('biased sums', Nl * C, 2));
  out.push(it('residual sums', Nl * C, 2), it('c_fc output, GELU output (/ tp)', (4 * N * C) / t, 2));
  return out;
}

/** gpt.ts embedding (+ the token index its backward reads); `uploads` adds stage / cp inputs. */
function gptEmbed(g: Geo): ActivationItem[] {
  const N = g.b * g.s, C = g.C;
  if (g.cp === 1) {
    return [
      it('token + position embedding', N * C),
      it('token index offsets', g.V + 1),
      it('token index positions', N),
    ];
  }
  return [
    it('token, position ids', N, 2),
    it('zero position table', g.s * C),
    it('token embedding', N * C),
    it('token index offsets', g.V + 1),
    it('position embedding (wpe by global position)', N * C),
    it('position index offsets', g.T + 1),
    it('index positions', N, 2),
    it('embedding sum', N * C),
  ];
}

/** RankContext.embed with tp > 1: vocab-parallel lookup, positions by lookup, their sum. */
function tpEmbed(g: Geo): ActivationItem[] {
  const N = g.b * g.s, C = g.C, Nl = g.sp ? N / g.t : N, Vt = paddedVocab(g.V, g.t) / g.t;
  const out = [
    it('vocab shard ids, position ids', N, 2),
    it('zero position table', g.s * C),
    it('vocab mask', N * C),
    it('token embedding (shard)', N * C),
    it('token index offsets', Vt + 1),
    it('index positions', N, 2),
    it('masked partial embedding', N * C),
    it(g.sp ? 'embedding reduce-scatter' : 'embedding allReduce', Nl * C),
    it('zero token table', g.s * C),
    it('position index offsets', g.T + 1),
    it('position embedding', N * C),
  ];
  if (g.sp) out.push(it('position rows of this rank', Nl * C));
  return [...out, it('embedding sum', Nl * C)];
}

/** ln_f, the tied LM head and the loss: gpt.ts's (+ targets upload for pipeline stages) or RankContext.head with tp > 1. */
function head(g: Geo, tp: boolean, targets: boolean): ActivationItem[] {
  const N = g.b * g.s, C = g.C, Nl = tp && g.sp ? N / g.t : N;
  const out = [it('ln_f output', Nl * C), it('LayerNorm mean, rstd', Nl, 2)];
  if (tp) {
    if (g.t > 1) out.push(it(g.sp ? 'sequence-parallel all-gather output' : 'f (copy) output', N * C));
    return [...out, it('logits (vocab / tp)', (N * paddedVocab(g.V, g.t)) / g.t), it('loss', 2)];
  }
  return [
    ...out,
    ...(targets ? [it('targets', N)] : []),
    it('logits', N * g.V),
    it('cross-entropy log-sum-exp', N),
    it('loss', 2),
  ];
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
  if (kind === 'ep') {
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
  const layer = tp ? tpLayer(g) : gptLayer(g);
  const times = (items: ActivationItem[], k: number) => items.map((x) => ({ ...x, count: x.count * k }));
  if (kind !== 'mesh') {
    const items = [...(tp ? tpEmbed(g) : gptEmbed(g)), ...times(layer, L), ...head(g, tp, g.cp > 1)]; // cp uploads its targets in the head
    const bytes = raw(items);
    return {
      kind,
      bytes,
      pooledBytes: pooled(items),
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
