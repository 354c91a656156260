/**
 * What the mesh trainer (mesh_trainer.ts) accepts, checked before any device or message: the
 * combinations it composes, the batch convention (gradAccum = the plan's micro-batches) and the
 * plan's own rules (plan.ts validatePlan, pipeline.ts checkPipeline).
 */
import type { TrainConfig } from '../train/config.ts';
import { MOE_ARCHS, pipelineBlocks } from '../models/archs.ts';
import { checkPipeline } from './pipeline.ts';
import type { PipelineSchedule } from './pipeline_schedule.ts';
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
  if (plan.ep > 1 && plan.zero) unsupported.push(`expert parallelism (ep ${plan.ep}) with ZeRO-${plan.zero}`);
  if (cfg.precision !== 'f32' && plan.cp > 1 && plan.cpKind === 'ring') {
    unsupported.push(
      `--precision ${cfg.precision} with ring attention (its block kernels read f32 q, k, v; use --cp-kind ulysses)`,
    );
  }
  if (plan.zero > 1 && cfg.recompute !== 'none') {
    unsupported.push(`--recompute ${cfg.recompute} with ZeRO-${plan.zero} (its per-layer gathers follow the forward)`);
  }
  if (unsupported.length) {
    throw new Error(
      `mesh trainer: ${unsupported.join('; ')} is not supported (it composes dp × pp × cp × tp (+ sp) with ep on ` +
        `MoE models, ZeRO with all of them but ep)`,
    );
  }
  checkZeroPlan(plan, cfg.arch);
  if (cfg.gradAccum !== plan.microBatches) {
    throw new Error(
      `mesh trainer: gradAccum ${cfg.gradAccum} must equal the plan's micro-batches ${plan.microBatches} (each micro-batch is drawn as the single-rank Trainer draws it)`,
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
 * Checks that ZeRO-`plan.zero` composes with the plan's model split on `arch`. ZeRO-2/3 keep no
 * full gradient after a micro-batch's backward (each 'layer' unit is reduce-scattered as it is
 * finished, zero_sync.ts), so a sum the sync makes after the schedule must work on the pieces:
 * the tied embedding's two copies (first and last stage) hold the same pieces and are summed
 * there, and sequence parallelism's partial gradients are summed over tp bucket by bucket just
 * before each reduce-scatter; but the hybrid's shared block is not summed piecewise over pp, and
 * an interleaved schedule would gather a rank's resident units once per chunk, not once per
 * micro-batch.
 * @throws Error naming the rule: ZeRO-2/3 with pp > 1 under the interleaved schedule or on an
 *   architecture with a block shared by stages (hybrid).
 */
export function checkZeroPlan(plan: ParallelPlan, arch = 'gpt'): void {
  if (plan.zero < 2) return;
  const rule = 'use zero 1, which reduces after the schedule';
  if (plan.pp > 1 && plan.schedule === 'interleaved') {
    throw new Error(
      `not supported yet: zero ${plan.zero} combined with pp ${plan.pp} under the interleaved schedule (each model chunk's forward would gather the resident units again); use gpipe or 1f1b, or ${rule}`,
    );
  }
  if (plan.pp > 1 && arch === 'hybrid') {
    throw new Error(
      `not supported yet: zero ${plan.zero} combined with pp ${plan.pp} on --arch hybrid (its shared block's gradient is summed over pp before the reduce-scatter); ${rule}`,
    );
  }
}

/**
 * recurrent-depth's pipeline rule, before any count that assumes it (docs/design.md §33): stages
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
