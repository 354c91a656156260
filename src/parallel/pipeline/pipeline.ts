/**
 * Pipeline parallelism's rules (docs/design.md#pipeline-parallelism and
 * docs/design.md#pipeline-schedules-and-the-bubble; picotron's pipeline_parallel.py, Megatron-LM
 * `core/pipeline_parallel/schedules.py` + `p2p_communication.py`): which configs split into p stages under which
 * schedule. The execution is pipeline_executor.ts, run by the mesh trainer (mesh_trainer.ts) over each rank's
 * ModelStages (stages.ts):
 *
 * - Batch: the single-rank run's global batch split in order into m micro-batches of b = B/m
 *   rows (per dp replica); the last stage's loss gradient is scaled by 1/m, so the summed
 *   gradient is the gradient of the batch mean (equal target counts per micro-batch; goldfish
 *   masking is refused).
 * - Forward of (micro, stage): a Tape per (micro, stage), alive until that backward. A stage
 *   > 0 starts from the received activation, a tape leaf with `requireGrad`. A stage that is not
 *   last ends in `sendForward`, a `collective` node on its output whose backward returns the
 *   gradient `recv-grad` received (Megatron's send_forward/recv_backward pair as one autograd
 *   function), so backward starts there exactly as from a loss.
 * - Messages are point-to-point on the pp group (buffered sends): `send-act` reads the output
 *   back and sends b·T·C floats (/tp under sp), `recv-act` writes them into a GPU tensor;
 *   `send-grad` sends the input's gradient.
 * - After the last backward: the embedding group {first, last} allReduces (sum) the two copies'
 *   gradients of a tied embedding (Megatron `_allreduce_word_embedding_grads`); the head's copy
 *   is left out of the gradient norm, as Megatron skips shared parameters.
 *
 * Elements sent per step by pp rank r (S = p·v, b = B/m): m·b·T·C·(#own stages s < S−1) +
 * m·b·T·C·(#own stages s > 0) in p2p sends (2·m·b·T·C per stage boundary in total), plus a ring
 * allReduce of V·C on the embedding group (first and last rank only).
 *
 * Every action is timed into a per-rank timeline of compute / comm / idle spans, idle being the
 * wait of a receive for its peer: the measured counterpart of pipeline_schedule.ts `dryRun`.
 */
import type { TrainConfig } from '../../train/config.ts';
import { checkSchedule, makeSchedule, type PipelineSchedule } from './pipeline_schedule.ts';
import { checkPipelineSplit } from './pipeline_stage.ts';
import { pipelineBlocks } from '../../models/archs.ts';

export interface PipelineOptions {
  schedule: 'gpipe' | '1f1b' | 'interleaved';
  /** Micro-batches m per step; must divide cfg.batchSize (and be a multiple of p for interleaved). */
  microBatches: number;
  /** Model chunks per rank (interleaved only; default 2 there, 1 otherwise). */
  virtualStages?: number;
}

/**
 * Checks that a config runs as a p-rank pipeline with these options.
 * @throws Error naming the violated rule: gradAccum 1, no goldfish / NEFTune, layers
 *   divisible by p·v, batchSize divisible by m, a valid schedule for (p, m, v).
 */
export function checkPipeline(cfg: TrainConfig, p: number, o: PipelineOptions): PipelineSchedule {
  if (cfg.gradAccum !== 1) {
    throw new Error(`pipeline: gradAccum must be 1 (micro-batching is the schedule's m), got ${cfg.gradAccum}`);
  }
  if (cfg.goldfishK) {
    throw new Error(
      'pipeline: goldfishK must be 0; uneven target counts per micro-batch would break the mean over micro-batches',
    );
  }
  if (cfg.neftuneAlpha) throw new Error('pipeline: neftuneAlpha must be 0 (the noise is seeded per full batch)');
  const v = o.schedule === 'interleaved' ? o.virtualStages ?? 2 : 1;
  if (o.schedule !== 'interleaved' && o.virtualStages !== undefined && o.virtualStages !== 1) {
    throw new Error(`pipeline: virtualStages ${o.virtualStages} needs schedule 'interleaved'`);
  }
  checkPipelineSplit(pipelineBlocks(cfg), p, v);
  const m = o.microBatches;
  if (!Number.isInteger(m) || m < 1 || cfg.batchSize % m) {
    throw new Error(`pipeline: microBatches (${m}) must be a positive integer dividing batchSize (${cfg.batchSize})`);
  }
  return checkSchedule(makeSchedule(o.schedule, p, m, v));
}
