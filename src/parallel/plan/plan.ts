/**
 * A parallel plan (docs/design.md#parallel-strategies): its type (plan_type.ts), the rules it must keep (rules.ts,
 * re-exported here) and where its ranks sit. Ranks are laid out on the `DeviceMesh` grid [dp, pp, cp, tp]
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
import { describeSync } from '../data/low_comm.ts';
import { compresses, formatCompressPolicy } from '../../comm/compression.ts';
import { DeviceMesh, type MeshCoords, type MeshDim } from '../../comm/mesh.ts';
import { shapeRankParams } from '../cost/derived_params.ts';
import { DEFAULT_PLAN, type ParallelPlan, planWorldSize } from './plan_type.ts';

export * from './plan_type.ts';
export { checkPlan, planProblems } from './rules.ts';

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
   * A recurrent architecture's own layout (run/plan_model.ts; absent: the GPT of src/models/gpt.ts):
   * its parameters per rank, counted from its declarations, and the tensor-parallel
   * collectives of its blocks.
   */
  layout?: ArchLayout;
}

/** What the planner needs of an architecture other than GPT (run/plan_model.ts). */
export interface ArchLayout {
  /** `--arch`: a built-in architecture other than gpt, or one registered (models/arch_hooks.ts). */
  arch: string;
  /** This rank's parameters under `plan`, counted from the model's declarations and placement. */
  params(plan: ParallelPlan, rank: number): RankParams;
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
