/**
 * Activation memory per rank (docs/design.md#memory-per-rank): the bytes of the tensors a rank's autograd tapes hold
 * at the moment most of them are alive, for THIS implementation, beside memory_cost.ts's parameter / gradient /
 * optimizer bytes. What one micro-batch keeps is counted from the model itself (tape_count.ts: its real forward over
 * a meta GPU; docs/design.md#accounting-derived-from-the-model), so every architecture, split, recomputation mode and
 * precision the trainers run is counted as they run it, with no second description of the ops.
 *
 * Pipelines: a tape per (micro-batch, stage) lives from its forward (or its activation's receive) to its backward,
 * so the schedule (pipeline_schedule.ts) is walked action by action and the peak taken; for 1F1B that is ≤ p
 * micro-batches, for GPipe m (`peakInFlight`). The non-pipeline trainers run micro-batches one after another: one
 * tape. The largest working set a throw-away child tape allocates (a recomputed segment, re-run one at a time in the
 * backward) is added once.
 *
 * Not counted: parameters, gradients and optimizer state (memory_cost.ts), activation gradients and kernel
 * workspaces that appear during backward, host copies, and per-step buffers the trainers allocate once (the
 * single-rank Trainer's token / target tensors). A measured pool peak therefore exceeds this figure.
 *
 * For the analytic model of presets at thousands of GPUs (step_memory.ts, plan_search.ts), Korthikanti et al.,
 * "Reducing Activation Recomputation in Large Transformer Models" (arXiv 2205.05198, §4):
 * {@link korthikantiLayerBytes}. Their fp16 count differs from this implementation's (fp32, no dropout,
 * FlashAttention keeping O and the log-sum-exp, a tape that frees nothing before its backward).
 */
import {
  type ParallelPlan,
  planMesh,
  type PlanModel,
  planWorldSize,
  rankAt,
  type StrategyKind,
} from '../parallel/plan/plan.ts';
import { makeSchedule, peakInFlight } from '../parallel/pipeline/pipeline_schedule.ts';
import { parseConfig, type TrainConfig } from '../train/config.ts';
import { type Bytes, countTapes, type StageTape, type TapeCountOptions } from './tape_count.ts';

export type { Bytes, StageTape } from './tape_count.ts';

/** Options of {@link activationMemory}. */
export type ActivationOptions = TapeCountOptions;

/** The activation memory of one rank. */
export interface ActivationMemory {
  /** The trainer whose model code is counted. */
  kind: StrategyKind;
  /** Peak bytes of live tape tensors (each in whole 4-byte words, unrounded). */
  bytes: number;
  /** The same with every allocation rounded up as the buffer pool does (src/gpu/pool.ts POOL_GRANULE). */
  pooledBytes: number;
  /** Forward tensors of one micro-batch through all of this rank's stages (bytes). */
  perMicroBatch: number;
  /** Most micro-batches (model chunks when interleaved) alive at once: pipeline_schedule.ts peakInFlight, else 1. */
  inFlight: number;
  /** The first block this rank runs, for one micro-batch (bytes); for gpt comparable with {@link korthikantiLayerBytes}. */
  perLayer: number;
  /** The largest recomputed segment (or detached recurrent-depth iteration) added to the peak once (bytes). */
  work: number;
  /** What one micro-batch keeps per stage this rank holds (stage −1: the single-rank Trainer's whole model). */
  stages: StageTape[];
}

/** Korthikanti et al.'s per-layer bytes (fp16, dropout, softmax saved): sbh(34 + 5as/h), with tp t: sbh(10 + 24/t + 5as/(ht)), with sp: sbh/t·(34 + 5as/h). */
export function korthikantiLayerBytes(s: number, b: number, h: number, a: number, t = 1, sp = false): number {
  const sbh = s * b * h, att = (5 * a * s) / h;
  return sp ? (sbh / t) * (34 + att) : sbh * (10 + 24 / t + att / t);
}

const add = (a: Bytes, b: Bytes): Bytes => ({ raw: a.raw + b.raw, pooled: a.pooled + b.pooled });
const max = (a: Bytes, b: Bytes): Bytes => ({ raw: Math.max(a.raw, b.raw), pooled: Math.max(a.pooled, b.pooled) });

/**
 * Rows of one micro-batch on one rank: the global batch cfg.batchSize·cfg.gradAccum over dp·m.
 * @throws Error when dp·m does not divide it.
 */
export function microBatchRows(cfg: TrainConfig, plan: ParallelPlan): number {
  const g = cfg.batchSize * cfg.gradAccum, b = g / (plan.dp * plan.microBatches);
  if (!Number.isInteger(b)) {
    throw new Error(
      `activation memory: the global batch ${g} does not split into dp ${plan.dp} × ${plan.microBatches} micro-batches of whole rows`,
    );
  }
  return b;
}

/**
 * The peak activation memory of `rank` under `plan` (see the module doc): one micro-batch of b rows (b =
 * {@link microBatchRows}) of T/cp tokens through the rank's stages, counted from the model, times what is in flight.
 * `cfg` is the run's config (a parallel run's global batch is cfg.batchSize·cfg.gradAccum, as run.ts
 * trainerConfig splits it), `vocabSize` the tokenizer's V.
 * @throws Error for a batch that does not split, or from the model for a split it does not take.
 */
export async function activationMemory(
  cfg: TrainConfig,
  plan: ParallelPlan,
  vocabSize: number,
  rank: number,
  o: ActivationOptions = {},
): Promise<ActivationMemory> {
  const b = microBatchRows(cfg, plan), count = await countTapes(cfg, plan, vocabSize, rank, b, o);
  const { stages, work } = count, perLayer = count.perLayer.raw, kind: StrategyKind = 'mesh';
  const perMicroBatch = stages.reduce((a, s) => a + s.input.raw + s.kept.raw, 0);
  if (stages[0].stage === -1) {
    const bytes = stages[0].kept.raw + work.raw;
    return {
      kind,
      bytes,
      pooledBytes: stages[0].kept.pooled + work.pooled,
      perMicroBatch,
      inFlight: 1,
      perLayer,
      work: work.raw,
      stages,
    };
  }
  // Pipelines: a tape per (micro, stage), from its input's arrival to its backward.
  const v = plan.schedule === 'interleaved' ? plan.virtualStages : 1, ppRank = planMesh(plan).coords(rank).pp;
  const sched = makeSchedule(plan.schedule, plan.pp, plan.microBatches, v);
  const of = new Map(stages.map((s) => [s.stage, s]));
  const alive = new Map<string, Bytes>();
  let peak: Bytes = { raw: 0, pooled: 0 };
  for (const a of sched.ranks[ppRank]) {
    const key = `${a.micro}:${a.stage}`, s = of.get(a.stage)!;
    if (a.kind === 'recv-act' || (a.kind === 'forward' && a.stage > 0 && !alive.has(key))) alive.set(key, s.input);
    if (a.kind === 'forward') alive.set(key, add(alive.get(key) ?? { raw: 0, pooled: 0 }, s.kept));
    if (a.kind === 'backward') alive.delete(key);
    peak = max(peak, [...alive.values()].reduce(add, { raw: 0, pooled: 0 }));
  }
  return {
    kind,
    bytes: peak.raw + work.raw,
    pooledBytes: peak.pooled + work.pooled,
    perMicroBatch,
    inFlight: peakInFlight(sched)[ppRank],
    perLayer,
    work: work.raw,
    stages,
  };
}

/**
 * {@link activationMemory} of every rank of `plan`, in rank order. Ranks that differ only in their dp, cp, tp or ep
 * coordinate hold tapes of equal shapes (each shard of a split is the same size), so one rank per pipeline
 * coordinate is counted.
 * @throws as activationMemory.
 */
export async function planActivations(
  cfg: TrainConfig,
  plan: ParallelPlan,
  vocabSize: number,
  o: ActivationOptions = {},
): Promise<ActivationMemory[]> {
  const mesh = planMesh(plan), byStage = new Map<number, ActivationMemory>();
  for (let pp = 0; pp < plan.pp; pp++) {
    byStage.set(pp, await activationMemory(cfg, plan, vocabSize, rankAt(plan, { dp: 0, pp, cp: 0, tp: 0 }), o));
  }
  return [...Array(planWorldSize(plan)).keys()].map((r) => byStage.get(mesh.coords(r).pp)!);
}

/**
 * The config of a model known only by its shape (a plan preset, src/perf/model_presets.ts): the GPT of
 * src/models/gpt.ts (gpt-moe with `model.nExpert`) of that shape, one micro-batch of the global batch
 * (`model.batchSize`), as parallel/cost/derived_params.ts shapeRankParams builds it; count it with
 * `model.vocabSize` as V.
 * @throws Error when the shape is not a valid model config (train/config.ts parseConfig names why).
 */
export function shapeConfig(model: PlanModel, o: { bias?: boolean; arch?: string } = {}): TrainConfig {
  const { nLayer, nHead, nEmbd, blockSize, nExpert, moeEvery, batchSize } = model;
  const moe = nExpert ? { arch: 'gpt-moe', nExpert, moeEvery: moeEvery ?? 1 } : { arch: o.arch ?? 'gpt' };
  return parseConfig({ nLayer, nHead, nEmbd, blockSize, batchSize, gradAccum: 1, bias: o.bias ?? true, ...moe });
}
