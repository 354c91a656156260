/**
 * The order in which a rank's model is made parallel, read in one place (docs/design.md#composition-per-rank), as
 * picotron's train.py reads it: tensor parallelism, then sequence and context parallelism, then the pipeline stages,
 * then the data-parallel (or ZeRO) gradient sync around all of it. Each line calls the piece that does the work; the
 * mesh trainer (mesh_trainer.ts) builds every plan's rank through {@link parallelize}.
 */
import type { Gpu } from '../../gpu/context.ts';
import type { Communicator } from '../../comm/communicator.ts';
import type { TrainConfig } from '../../train/config.ts';
import type { ParallelPlan } from '../plan/plan.ts';
import type { PipelineSchedule } from '../pipeline/pipeline_schedule.ts';
import { PipelineExecutor } from '../pipeline/pipeline_executor.ts';
import { GradSync } from '../data/grad_sync.ts';
import { OuterSync } from '../data/outer_sync.ts';
import { type RankModel, rankModel } from './rank_model.ts';

/** One rank's parallel model: its place and stages, their pipeline and their gradient syncs. */
export interface ParallelRank {
  /** Mesh coordinates, groups, cp positions and the ModelStages over the rank's RankContext. */
  model: RankModel;
  /** Runs `program`'s forward and backward actions over the stages, exchanging activations over pp. */
  exec: PipelineExecutor;
  /** The dp·cp gradient sync: sp partials, the tied embedding, DDP's buckets or ZeRO-1/2/3. */
  sync: GradSync;
  /** The low-communication outer loop (local SGD, DiLoCo) when the plan has --sync other than ddp, else null. */
  outer: OuterSync | null;
}

/**
 * Builds rank `world.rank`'s parallel model for `plan` (every rank calls it with the same arguments).
 * `program` is the checked pipeline schedule (mesh_plan.ts pipelineProgram), `rows` the sequences per
 * micro-batch (B / dp), `bucketBytes` the DP / ZeRO gradient buckets.
 * @throws Error from ModelStages (layers, heads or widths not divisible) or the gradient sync's checks.
 */
export function parallelize(
  gpu: Gpu,
  cfg: TrainConfig,
  plan: ParallelPlan,
  world: Communicator,
  vocabSize: number,
  program: PipelineSchedule,
  rows: number,
  bucketBytes?: number | 'layer',
): ParallelRank {
  // tp → sp → cp (→ ep): one RankContext every layer consults; pp: this rank's stage of layers (ModelStages).
  const rm = rankModel(gpu, cfg, plan, world, vocabSize, program.v);
  // pp: the schedule that runs the stage's micro-batches (1F1B, interleaved, zero-bubble).
  const exec = new PipelineExecutor(gpu, rm.stages, rm.p2p, program, rows, cfg.blockSize / plan.cp);
  // dp / ZeRO: gradient sync over the ranks holding the same shard (dp·cp).
  const sync = new GradSync(gpu, rm.stages, rm.coords, world, rm.comm('tp'), rm.groups, {
    ...plan,
    bucketBytes,
    local: !!plan.sync,
  });
  // dp, low-communication: the outer loop over the same group, when the plan asks for it.
  const outer = plan.sync ? new OuterSync(gpu, rm.stages.params, sync.dpGroup, plan.sync, cfg.steps) : null;
  return { model: rm, exec, sync, outer };
}
