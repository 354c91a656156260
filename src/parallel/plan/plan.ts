/**
 * A parallel plan (docs/design.md#parallel-strategies): the degrees of every strategy and the checks that run
 * before any worker starts. Ranks are laid out on the `DeviceMesh` grid [dp, pp, cp, tp]
 * (src/comm/mesh.ts, picotron's order); expert parallelism lives inside the DP dimension
 * (ep consecutive DP indices form one EP group, as DeepSpeed-MoE's expert-parallel groups).
 *
 * Batch convention: `batchSize` is the global batch of one optimizer step (the sequences the
 * single-rank run processes per step), split into dp replicas × microBatches micro-batches of
 * b = batchSize / (dp · microBatches) sequences each.
 *
 * Vocabulary: a vocab-parallel embedding pads V up to a multiple of tp (Megatron's
 * make_vocab_size_divisible_by) instead of rejecting the plan, so tinyshakespeare's 65 chars
 * work with tp 2. Padded rows are never a target; the cross-entropy must mask their logits
 * to −∞ so the loss equals the unpadded model's.
 */
import { describeSync, syncProblems, type SyncSpec } from '../data/low_comm.ts';
import { compresses, type CompressPolicy, formatCompressPolicy } from '../../comm/compression.ts';
import { DeviceMesh, type MeshCoords, type MeshDim } from '../../comm/mesh.ts';
import { SCHEDULE_KINDS, type ScheduleKind } from '../pipeline/pipeline_schedule.ts';
import { shapeRankParams } from '../cost/derived_params.ts';

export type CpKind = 'ring' | 'ulysses';
/**
 * The trainer that runs a plan (strategy.ts `strategyOf`): the mesh trainer for every plan. Kept
 * as a type because run summaries, traces and checkpoints record it.
 */
export type StrategyKind = 'mesh';
export const CP_KINDS: readonly CpKind[] = ['ring', 'ulysses'];

export interface ParallelPlan {
  dp: number;
  pp: number;
  cp: number;
  tp: number;
  /** Expert-parallel degree; must divide dp (experts are spread over part of each DP group). */
  ep: number;
  /** ZeRO stage over the DP group: 0 off, 1 optimizer state, 2 + gradients, 3 + parameters. */
  zero: 0 | 1 | 2 | 3;
  /** Megatron sequence parallelism on top of tp. */
  sp: boolean;
  schedule: ScheduleKind;
  /** Model chunks per pipeline rank (interleaved 1F1B only; 1 otherwise). */
  virtualStages: number;
  microBatches: number;
  cpKind: CpKind;
  /** Compression per parallel dimension (comm/compression.ts); absent: none. */
  compress?: CompressPolicy;
  /** Low-communication data parallelism (low_comm.ts); absent: DDP, every step. */
  sync?: SyncSpec;
}

/** What validation needs from the model. `nExpert` is set for MoE models only. */
export interface PlanModel {
  nLayer: number;
  nHead: number;
  nEmbd: number;
  blockSize: number;
  /** Global batch per optimizer step (see the module doc). */
  batchSize: number;
  vocabSize: number;
  nExpert?: number;
  /** With nExpert: every moeEvery-th block (1-based, as models/moe_layer.ts isMoELayer) has the experts; the others a dense MLP. Default 1. */
  moeEvery?: number;
  /**
   * A recurrent architecture's own layout (arch_params.ts; absent: the GPT of src/models/gpt.ts):
   * its parameters per rank, counted from its declarations, and the tensor-parallel
   * collectives of its blocks.
   */
  layout?: ArchLayout;
}

/** What the planner needs of an architecture other than GPT (arch_params.ts archLayout). */
export interface ArchLayout {
  arch: 'linear' | 'mamba' | 'hybrid' | 'gpt-moe' | 'mamba-moe' | 'recurrent-depth';
  /** This rank's parameters under `plan`, counted from the model's declarations and placement. */
  params(plan: ParallelPlan, rank: number): RankParams;
  /** Mamba's x_proj output widths R (dt rank) and N (state), allReduced per block under tp. */
  dtRank: number;
  dState: number;
  /** Hybrid: the shared attention block runs after layers i with (i + 1) % attnEvery = 0. */
  attnEvery: number;
  /** Mamba / hybrid: inner width D = expand · C (src/perf/activation_memory.ts counts its tensors). */
  expand: number;
  /** Linear: one log-decay per head and step, or per key channel (src/perf/activation_memory.ts). */
  decay: 'head' | 'channel';
  /**
   * Recurrent depth: prelude blocks P, core blocks R, backprop depth k, mean iterations r̄
   * (docs/design.md#recurrent-depth).
   */
  recurrence?: { prelude: number; core: number; backprop: number; meanIters: number };
}

/** Single rank, no sharding, 1F1B with one micro-batch, ring attention when cp > 1. */
export const DEFAULT_PLAN: Readonly<ParallelPlan> = {
  dp: 1,
  pp: 1,
  cp: 1,
  tp: 1,
  ep: 1,
  zero: 0,
  sp: false,
  schedule: '1f1b',
  virtualStages: 1,
  microBatches: 1,
  cpKind: 'ring',
};

/** `DEFAULT_PLAN` with `over` applied (no checks; see {@link validatePlan}). */
export const makePlan = (over: Partial<ParallelPlan> = {}): ParallelPlan => ({ ...DEFAULT_PLAN, ...over });

/** dp·pp·cp·tp: the ranks a plan occupies. */
export const planWorldSize = (p: ParallelPlan) => p.dp * p.pp * p.cp * p.tp;

/** Every rule `plan` breaks for `model` on `worldSize` ranks (when given), in words. */
export function planProblems(plan: ParallelPlan, model: PlanModel, worldSize?: number): string[] {
  const out: string[] = [];
  const { dp, pp, cp, tp, ep, zero, sp, schedule, virtualStages: v, microBatches: m, cpKind } = plan;
  const degrees = { dp, pp, cp, tp, ep, virtualStages: v, microBatches: m };
  for (const [k, x] of Object.entries(degrees)) {
    if (!Number.isInteger(x) || x < 1) out.push(`${k} must be a positive integer, got ${x}`);
  }
  for (const k of ['nLayer', 'nHead', 'nEmbd', 'blockSize', 'batchSize', 'vocabSize'] as const) {
    if (!Number.isInteger(model[k]) || model[k] < 1) out.push(`model ${k} must be a positive integer, got ${model[k]}`);
  }
  if (![0, 1, 2, 3].includes(zero)) out.push(`zero must be 0, 1, 2 or 3, got ${zero}`);
  if (!SCHEDULE_KINDS.includes(schedule)) out.push(`schedule '${schedule}' is not one of ${SCHEDULE_KINDS.join(', ')}`);
  if (!CP_KINDS.includes(cpKind)) out.push(`cpKind '${cpKind}' is not one of ${CP_KINDS.join(', ')}`);
  if (out.length) return out; // the divisibility rules below assume sane numbers
  const div = (a: number, b: number) => a % b === 0;
  const { nLayer, nHead, nEmbd, blockSize: T, batchSize, nExpert } = model;
  if (!div(nEmbd, tp)) out.push(`nEmbd ${nEmbd} is not divisible by tp ${tp}`);
  if (!div(nHead, tp)) out.push(`heads ${nHead} not divisible by tp ${tp}`);
  if (sp && tp === 1) out.push('sequence parallel (sp) requires tp > 1');
  out.push(...syncProblems(plan));
  if (zero > 0 && dp * cp === 1) out.push(`zero ${zero} shards over the dp·cp group and requires dp·cp > 1`);
  if (zero > 0 && plan.compress?.dp.kind === 'powersgd') {
    out.push(
      `--compress dp=powersgd needs zero 0: PowerSGD all-reduces low-rank factors of whole gradient matrices, ZeRO reduce-scatters flat buckets; with zero ${zero} use an elementwise scheme (fp16, bf16, int8, int4, topk, sign)`,
    );
  }
  const stages = pp * v;
  if (!div(nLayer, stages)) {
    out.push(
      v > 1
        ? `layers ${nLayer} not divisible by pp·virtualStages = ${pp}·${v}`
        : `layers ${nLayer} not divisible by pp ${pp}`,
    );
  }
  if (v > 1 && schedule !== 'interleaved') out.push(`virtualStages ${v} needs schedule interleaved (got ${schedule})`);
  if (schedule === 'interleaved') {
    if (pp === 1) out.push('schedule interleaved requires pp > 1');
    if (v < 2) out.push('schedule interleaved requires virtualStages ≥ 2');
    if (!div(m, pp)) out.push(`interleaved 1F1B needs micro-batches ${m} divisible by pp ${pp}`);
  }
  if (cp > 1 && cpKind === 'ring' && !div(T, 2 * cp)) {
    out.push(`sequence ${T} not divisible by cp·2 = ${2 * cp} for zig-zag ring attention`);
  }
  if (cp > 1 && cpKind === 'ulysses') {
    if (!div(T, cp)) out.push(`sequence ${T} not divisible by cp ${cp}`);
    if (div(nHead, tp) && !div(nHead / tp, cp)) {
      out.push(
        tp > 1
          ? `heads per TP rank ${nHead / tp} not divisible by the Ulysses degree cp ${cp}`
          : `heads ${nHead} not divisible by the Ulysses degree cp ${cp}`,
      );
    }
  }
  if (sp && tp > 1 && div(T, cp) && !div(T / cp, tp)) {
    out.push(`sequence ${T / cp} per CP rank not divisible by tp ${tp} for sequence parallelism`);
  }
  if (!div(batchSize, m * dp)) out.push(`batch ${batchSize} not divisible by micro-batches × dp (${m} × ${dp})`);
  if (!div(dp, ep)) out.push(`ep must divide dp (ep ${ep}, dp ${dp})`);
  if (ep > 1 && !nExpert) out.push(`ep ${ep} needs a mixture-of-experts model (nExpert)`);
  if (nExpert !== undefined) {
    if (!Number.isInteger(nExpert) || nExpert < 1) out.push(`nExpert must be a positive integer, got ${nExpert}`);
    else if (!div(nExpert, ep)) out.push(`experts ${nExpert} not divisible by ep ${ep}`);
  }
  if (worldSize !== undefined && worldSize !== planWorldSize(plan)) {
    out.push(`world size ${worldSize} ≠ dp·pp·cp·tp = ${dp}·${pp}·${cp}·${tp} = ${planWorldSize(plan)}`);
  }
  return out;
}

/**
 * Checks `plan` against `model` (and the world size when given) before anything starts.
 * @throws one Error listing every violated rule, e.g. "nEmbd 64 is not divisible by tp 3".
 */
export function validatePlan(plan: ParallelPlan, model: PlanModel, worldSize?: number): ParallelPlan {
  const problems = planProblems(plan, model, worldSize);
  if (problems.length) throw new Error(`invalid parallel plan: ${problems.join('; ')}`);
  return plan;
}

/** V padded up to a multiple of tp for the vocab-parallel embedding (see the module doc). */
export const paddedVocab = (vocabSize: number, tp: number) => Math.ceil(vocabSize / tp) * tp;

/** The `DeviceMesh` of `plan` seen from `rank` (world = dp·pp·cp·tp). */
export const planMesh = (plan: ParallelPlan, rank = 0) =>
  new DeviceMesh([plan.dp, plan.pp, plan.cp, plan.tp], planWorldSize(plan), rank);

/** Mesh coordinates of `rank` plus its EP index (position inside its EP group). */
export function rankCoords(plan: ParallelPlan, rank: number): MeshCoords & { ep: number } {
  const c = planMesh(plan).coords(rank);
  return { ...c, ep: c.dp % plan.ep };
}

/** World rank at `coords` (mesh.rankOf). */
export const rankAt = (plan: ParallelPlan, coords: MeshCoords) => planMesh(plan).rankOf(coords);

/** World ranks of `rank`'s group along a mesh dimension or the EP group, ordered by index. */
export function planGroup(plan: ParallelPlan, dim: MeshDim | 'ep', rank: number): number[] {
  const mesh = planMesh(plan);
  if (dim !== 'ep') return mesh.group(dim, rank);
  const dpGroup = mesh.group('dp', rank), first = Math.floor(mesh.coords(rank).dp / plan.ep) * plan.ep;
  return dpGroup.slice(first, first + plan.ep);
}

/** Micro-batch size b per DP rank: batchSize / (dp · microBatches). */
export const microBatchSize = (plan: ParallelPlan, model: PlanModel) => model.batchSize / (plan.dp * plan.microBatches);

/** One line such as `dp 2 · pp 2 · cp 1 · tp 2 · zero 0 · sp off · 1f1b × 4 micro-batches`. */
export function describePlan(p: ParallelPlan): string {
  const sched = p.schedule === 'interleaved' ? `interleaved (v ${p.virtualStages})` : p.schedule;
  return `dp ${p.dp} · pp ${p.pp} · cp ${p.cp}${
    p.cp > 1 ? ` (${p.cpKind})` : ''
  } · tp ${p.tp} · ep ${p.ep} · zero ${p.zero} · ` +
    `sp ${p.sp ? 'on' : 'off'} · ${sched} × ${p.microBatches} micro-batches (${planWorldSize(p)} ranks)` +
    (compresses(p.compress) ? ` · compress ${formatCompressPolicy(p.compress!)}` : '') +
    (p.sync ? ` · ${describeSync(p.sync)}` : '');
}

/** Parameter elements one rank holds: `dense` (synchronised over dp·cp) and `expert` (over dp·cp/ep). */
export interface RankParams {
  dense: number;
  expert: number;
  /**
   * Of `dense`: LayerNorm weights/biases, row-parallel biases and, on the first stage, the
   * positional table wpe (T, C), whose gradients SP sums over tp (each rank's gradient covers
   * only its own rows of the sequence; sequence_parallel.ts adds positions after the scatter).
   */
  spReplicated: number;
  /** Of `dense`: the tied word-embedding slice ((V padded)/tp × C) on the first and last stage. */
  embedding: number;
  /** Of `dense`: a block every stage holds (the hybrid's shared attention), summed over pp. */
  shared?: number;
}

/**
 * Parameters on `rank` under `plan`, counted from the model code (cost/derived_params.ts): the
 * architecture's own count when `model.layout` has one, else the GPT of src/models/gpt.ts of
 * `model`'s shape (gpt-moe with nExpert) with or without Linear biases (`bias`, default true as
 * the config default), built as the rank builds it (Megatron's tp split, pp stages, tied head copy).
 * @throws Error when the shape is not a valid model config.
 */
export function rankParams(plan: ParallelPlan, model: PlanModel, rank: number, bias = true): RankParams {
  return (model.layout?.params ?? shapeRankParams(model, bias))(plan, rank);
}

/**
 * Elements of ZeRO-2/3's working buffers on a rank of a GPT that is whole or split by tp
 * (zero_units.ts under zero_sync.ts): the units kept for the whole micro-batch that its
 * pipeline stage holds (the first: its wte shard (V_p/t, C) and wpe (T, C); the last: ln_f and
 * its wte copy) plus one block's shard, the only layer resident at a time (under ep with its
 * E/ep experts). Alignment padding is not counted.
 */
export function zeroWorkingElements(
  model: PlanModel,
  bias = true,
  tp = 1,
  at = { first: true, last: true },
  ep = 1,
): number {
  const single = rankParams({ ...DEFAULT_PLAN, pp: 1, tp, ep }, model, 0, bias);
  const C = model.nEmbd, T = model.blockSize, wte = (paddedVocab(model.vocabSize, tp) / tp) * C;
  const block = (single.dense + single.expert - wte - T * C - 2 * C) / model.nLayer;
  return (at.first || at.last ? wte : 0) + (at.first ? T * C : 0) + (at.last ? 2 * C : 0) + block;
}
