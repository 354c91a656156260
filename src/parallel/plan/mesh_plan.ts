/**
 * What the mesh trainer (mesh_trainer.ts) accepts, checked before any device or message: the
 * combinations it composes, the batch convention (gradAccum = the plan's micro-batches) and the
 * plan's own rules (plan.ts validatePlan, pipeline.ts checkPipeline).
 */
import type { TrainConfig } from '../../train/config.ts';
import { MOE_ARCHS, pipelineBlocks } from '../../models/archs.ts';
import { checkPipeline } from '../pipeline/pipeline.ts';
import type { PipelineSchedule } from '../pipeline/pipeline_schedule.ts';
import { type ParallelPlan, validatePlan } from './plan.ts';

/**
 * Checks, before any device or message, that `plan` can train `cfg` on `worldSize` ranks with
 * this trainer, and returns the pipeline program every pp rank runs.
 * @throws Error naming an unsupported combination ("mesh trainer: context parallelism (cp 2) is
 *   not composed yet …"), gradAccum ≠ micro-batches, then validatePlan's list of broken rules,
 *   then checkPipeline's (no goldfish / NEFTune, a valid schedule).
 */
export function checkMeshPlan(
  plan: ParallelPlan,
  cfg: TrainConfig,
  vocabSize: number,
  worldSize: number,
): PipelineSchedule {
  const unsupported: string[] = [];
  if (plan.ep > 1 && !(MOE_ARCHS as readonly string[]).includes(cfg.arch)) {
    unsupported.push(`expert parallelism (ep ${plan.ep}) on --arch ${cfg.arch} (no experts)`);
  }
  if (cfg.precision !== 'f32' && plan.cp > 1 && plan.cpKind === 'ring') {
    unsupported.push(
      `--precision ${cfg.precision} with ring attention (its block kernels read f32 q, k, v; use --cp-kind ulysses)`,
    );
  }
  if (cfg.topkAttention) {
    unsupported.push(`--topk-attention ${cfg.topkAttention} (evaluation of single-rank runs only)`);
  }
  if (unsupported.length) {
    throw new Error(
      `mesh trainer: ${unsupported.join('; ')} is not supported (it composes dp × pp × cp × tp (+ sp) with ep on ` +
        `MoE models, ZeRO with all of them)`,
    );
  }
  if (cfg.gradAccum !== plan.microBatches) {
    throw new Error(
      `mesh trainer: gradAccum ${cfg.gradAccum} must equal the plan's micro-batches ${plan.microBatches} (a plan's trainer accumulates gradients over the plan's micro-batches of the global batch)`,
    );
  }
  const { nHead, nEmbd, blockSize } = cfg, batchSize = cfg.batchSize * cfg.gradAccum, nLayer = pipelineBlocks(cfg);
  checkPipelinePieces(plan, cfg);
  const experts = plan.ep > 1 ? { nExpert: cfg.nExpert, moeEvery: cfg.moeEvery } : {};
  validatePlan(plan, { nLayer, nHead, nEmbd, blockSize, batchSize, vocabSize, ...experts }, worldSize);
  return checkPipeline({ ...cfg, batchSize: batchSize / plan.dp, gradAccum: 1 }, plan.pp, {
    schedule: plan.schedule,
    microBatches: plan.microBatches,
    virtualStages: plan.schedule === 'interleaved' ? plan.virtualStages : undefined,
  });
}

/**
 * recurrent-depth's pipeline rule, before any count that assumes it (docs/design.md#recurrent-depth): stages
 * split its P + 1 + Q pieces, not nLayer — said in those terms, since validatePlan's "layers not
 * divisible" would name a number the user never gave. Other architectures pass.
 * @throws Error naming P, Q, their piece count and pp·v when the pieces do not divide.
 */
export function checkPipelinePieces(plan: ParallelPlan, cfg: TrainConfig): void {
  const pieces = pipelineBlocks(cfg), stages = plan.pp * (plan.schedule === 'interleaved' ? plan.virtualStages : 1);
  if (cfg.arch === 'recurrent-depth' && pieces % stages) {
    throw new Error(
      `pipeline: recurrent-depth's stages split its pieces, preludeLayers + 1 (the core, every iteration) + codaLayers = ${cfg.preludeLayers} + 1 + ${cfg.codaLayers} = ${pieces}, not nLayer; ${pieces} is not divisible by pp·v = ${stages} (change preludeLayers or codaLayers)`,
    );
  }
}
