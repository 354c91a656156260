/**
 * What the mesh trainer (mesh_trainer.ts) accepts, checked on the host before any device or message: the plan's
 * rules (rules.ts's one table, with the run's config) and the batch convention (gradAccum = the plan's
 * micro-batches); and the pipeline program every pp rank runs, which ranks build without re-checking the plan.
 */
import type { TrainConfig } from '../../train/config.ts';
import { MOE_ARCHS, pipelineBlocks } from '../../models/archs.ts';
import { checkSchedule, makeSchedule, type PipelineSchedule } from '../pipeline/pipeline_schedule.ts';
import type { ParallelPlan } from './plan_type.ts';
import { checkPlan, type RunFacts } from './rules.ts';
import { MAX_RUN_WORLD } from './limits.ts';

/** What rules.ts reads of a run's config. */
export const runFactsOf = (cfg: TrainConfig): RunFacts => ({
  arch: cfg.arch,
  precision: cfg.precision,
  topkAttention: cfg.topkAttention,
  goldfishK: cfg.goldfishK,
  neftuneAlpha: cfg.neftuneAlpha,
  preludeLayers: cfg.preludeLayers,
  codaLayers: cfg.codaLayers,
  nLayer: cfg.nLayer,
});

/**
 * The trainer's own invariant, which the host's trainerConfig (run.ts) always keeps: a rank's trainer accumulates
 * gradients over the plan's micro-batches. Cheap, so ranks assert it too.
 * @throws Error when `cfg.gradAccum` ≠ the plan's micro-batches.
 */
export function checkTrainerBatch(plan: ParallelPlan, cfg: TrainConfig): void {
  if (cfg.gradAccum !== plan.microBatches) {
    throw new Error(
      `mesh trainer: gradAccum ${cfg.gradAccum} must equal the plan's micro-batches ${plan.microBatches} (a plan's trainer accumulates gradients over the plan's micro-batches of the global batch)`,
    );
  }
}

/**
 * The pipeline program of `plan` (every rank's list of actions), generated and proven deadlock-free by
 * pipeline_schedule.ts: an internal assertion of the generator, not a check of the user's plan.
 */
export const pipelineProgram = (plan: ParallelPlan): PipelineSchedule =>
  checkSchedule(makeSchedule(plan.schedule, plan.pp, plan.microBatches, plan.virtualStages));

/**
 * Checks on the host, before any device or message, that `plan` can train `cfg` (a rank's trainer config:
 * run.ts trainerConfig) on `worldSize` ranks, and returns the pipeline program every pp rank runs.
 * @throws Error from {@link checkTrainerBatch}, then rules.ts checkPlan's one list of every broken rule.
 */
export function checkMeshPlan(
  plan: ParallelPlan,
  cfg: TrainConfig,
  vocabSize: number,
  worldSize: number,
): PipelineSchedule {
  checkTrainerBatch(plan, cfg);
  const { nHead, nEmbd, blockSize } = cfg, batchSize = cfg.batchSize * cfg.gradAccum, nLayer = pipelineBlocks(cfg);
  const moe = (MOE_ARCHS as readonly string[]).includes(cfg.arch);
  const experts = plan.ep > 1 && moe ? { nExpert: cfg.nExpert, moeEvery: cfg.moeEvery } : {};
  const model = { nLayer, nHead, nEmbd, blockSize, batchSize, vocabSize, ...experts };
  checkPlan(plan, model, worldSize, runFactsOf(cfg), MAX_RUN_WORLD);
  return pipelineProgram(plan);
}
