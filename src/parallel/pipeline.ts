/**
 * Pipeline parallelism, executed (docs/design.md §16, §20; picotron's pipeline_parallel.py, Megatron-LM
 * `core/pipeline_parallel/schedules.py` + `p2p_communication.py`): each pipeline rank runs its
 * program from pipeline_schedule.ts action by action over its GPT stages (pipeline_stage.ts).
 * The executor ({@link PipelineExecutor}) takes any `PipelineStageModel`, so the mesh trainer
 * (mesh_trainer.ts) runs the same schedules over tensor-parallel stages (mesh_stage.ts);
 * {@link PipelineTrainer} is the plain-GPT pipeline on top of it.
 *
 * - Batch: the single-rank run's global batch `dataset.batch('train', B, T, seed, step, 0)`
 *   split in order into m micro-batches of b = B/m rows; the last stage's loss gradient is
 *   scaled by 1/m, so the summed gradient is the gradient of the batch mean (equal target
 *   counts per micro-batch; goldfish masking is refused).
 * - Forward of (micro, stage): a Tape per (micro, stage), alive until that backward. A stage
 *   > 0 starts from the received activation (B_micro, T, C), a tape leaf with `requireGrad`.
 *   A stage that is not last ends in `sendForward`, a `collective` node on its output whose
 *   backward returns the gradient `recv-grad` received (Megatron's send_forward/recv_backward
 *   pair as one autograd function), so backward starts there exactly as from a loss.
 * - Messages are point-to-point on the pp group (Communicator send/recv, buffered sends):
 *   `send-act` reads the output back and sends b·T·C floats, `recv-act` writes them into a
 *   GPU tensor; `send-grad` sends `tape.gradOf(input)`, b·T·C floats.
 * - After the last backward: the embedding group {first, last} allReduces (sum) the two wte
 *   gradients (Megatron `_allreduce_word_embedding_grads`); one 2-element allReduce (sum) over
 *   the pp group carries [this rank's squared grad norm, its share of the loss] (the head's
 *   wte copy left out of the norm, as Megatron skips shared params); clip + AdamW on own params
 *   use torch's clip_grad_norm_ scale min(1, clip/(‖g‖+1e-6)).
 *
 * Elements sent per step by pp rank r (S = p·v, b = B/m):
 *   p2p  m·b·T·C·(#own stages s < S−1) + m·b·T·C·(#own stages s > 0)   (activations + gradients;
 *        2·m·b·T·C per stage boundary in total)
 *   + ring allReduce of V·C on the embedding group (first and last rank only; V·C each for p ≥ 2)
 *   + ring allReduce of 2 elements on the pp group.
 *
 * Every action is timed (wall ms from the step's start) into a per-rank timeline of
 * compute / comm / idle spans (pipeline_schedule.ts's Span), idle being the wait of a receive
 * for its peer: the measured counterpart of `dryRun`. The end-of-step allReduces are one comm
 * span each, including any wait for the slowest rank.
 */
import type { Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { adamwUpdate, gradNorm, packAdamHyper } from '../kernels/adamw.ts';
import type { Communicator } from '../comm/communicator.ts';
import { wallMs } from '../comm/trace.ts';
import type { TextDataset } from '../data/dataset.ts';
import type { TrainConfig } from '../train/config.ts';
import { lrAt, type ScheduleSpec, scheduleFromConfig, validateSchedule } from '../train/schedules.ts';
import type { StepRecord } from '../train/trainer.ts';
import { checkSchedule, makeSchedule, type PipelineSchedule } from './pipeline_schedule.ts';
import { PipelineExecutor, type SpanFn } from './pipeline_executor.ts';
import type { Span } from './pipeline_sim.ts';
import { checkPipelineSplit } from './pipeline_stage.ts';
import { checkStageArch, ModelStages } from './stages.ts';
import { RankContext } from './rank_context.ts';
import { subGroup } from './data_parallel.ts';
import { type Sent, TrafficMeter } from './traffic.ts';
import { clipScale } from '../train/optimizer.ts';

export interface PipelineOptions {
  schedule: 'gpipe' | '1f1b' | 'interleaved';
  /** Micro-batches m per step; must divide cfg.batchSize (and be a multiple of p for interleaved). */
  microBatches: number;
  /** Model chunks per rank (interleaved only; default 2 there, 1 otherwise). */
  virtualStages?: number;
}

/** One step as a pipeline rank saw it. `loss` and `gradNorm` are global (every rank has them). */
export interface PipelineStepRecord extends StepRecord {
  /** Elements this rank sent during the step, keyed `group/op` (traffic.ts). */
  sent: Sent;
  /** This rank's spans, ms from the step's start, in time order. */
  timeline: Span[];
  /** Wall clock (epoch ms, src/comm/trace.ts wallMs) of the step's start, to line ranks' timelines up. */
  origin: number;
}

/**
 * Checks that a config runs as a p-rank pipeline with these options.
 * @throws Error naming the violated rule: a layered arch (no block shared between stages), gradAccum 1, no goldfish / NEFTune, layers
 *   divisible by p·v, batchSize divisible by m, a valid schedule for (p, m, v).
 */
export function checkPipeline(cfg: TrainConfig, p: number, o: PipelineOptions): PipelineSchedule {
  checkStageArch(cfg.arch, p);
  if (cfg.gradAccum !== 1) throw new Error(`pipeline: gradAccum must be 1 (micro-batching is the schedule's m), got ${cfg.gradAccum}`);
  if (cfg.goldfishK) throw new Error('pipeline: goldfishK must be 0; uneven target counts per micro-batch would break the mean over micro-batches');
  if (cfg.neftuneAlpha) throw new Error('pipeline: neftuneAlpha must be 0 (the noise is seeded per full batch)');
  const v = o.schedule === 'interleaved' ? o.virtualStages ?? 2 : 1;
  if (o.schedule !== 'interleaved' && o.virtualStages !== undefined && o.virtualStages !== 1) {
    throw new Error(`pipeline: virtualStages ${o.virtualStages} needs schedule 'interleaved'`);
  }
  checkPipelineSplit(cfg.nLayer, p, v);
  const m = o.microBatches;
  if (!Number.isInteger(m) || m < 1 || cfg.batchSize % m) {
    throw new Error(`pipeline: microBatches (${m}) must be a positive integer dividing batchSize (${cfg.batchSize})`);
  }
  return checkSchedule(makeSchedule(o.schedule, p, m, v));
}

/**
 * One pipeline rank of a layered model: its stages' parameters, the schedule's program for this rank, and
 * the AdamW state of its own parameters. Every rank of `comm` (the pp group, rank = stage rank)
 * constructs it with the same config, seed and options and calls {@link step} with the same steps.
 */
export class PipelineTrainer {
  readonly model: ModelStages;
  readonly plan: PipelineSchedule;
  readonly schedule: ScheduleSpec;
  /** Rows per micro-batch, B/m. */
  readonly rows: number;
  private readonly exec: PipelineExecutor;
  private readonly scalars: Communicator;
  private readonly embGroup: Communicator | null;
  private readonly meter: TrafficMeter;
  private readonly lossAcc: Tensor;
  private readonly norm: Tensor;
  private readonly partNorm: Tensor;
  private readonly hyper: Tensor;

  /**
   * @param comm the pipeline group; comm.size = p, comm.rank = this pipeline rank.
   * @throws Error from {@link checkPipeline} or the LR schedule check.
   */
  constructor(readonly gpu: Gpu, readonly data: TextDataset, readonly cfg: TrainConfig, vocabSize: number, comm: Communicator, opts: PipelineOptions) {
    this.plan = checkPipeline(cfg, comm.size, opts);
    this.schedule = scheduleFromConfig(cfg);
    validateSchedule(this.schedule, cfg.steps);
    const { blockSize } = cfg, self = comm.newGroup([comm.ranks[comm.rank]], `${comm.id}/self`);
    this.model = new ModelStages(gpu, cfg, vocabSize, new RankContext({ tp: self, vocabSize }), { ppRank: comm.rank, pp: comm.size, v: this.plan.v });
    this.rows = cfg.batchSize / this.plan.m;
    this.exec = new PipelineExecutor(gpu, this.model, subGroup(comm, 'pp'), this.plan, this.rows, blockSize);
    this.scalars = subGroup(comm, 'scalars');
    const ends = [...new Set([comm.ranks[0], comm.ranks[comm.size - 1]])];
    this.embGroup = this.model.tied && ends.length > 1 && ends.includes(comm.ranks[comm.rank]) ? comm.newGroup(ends, `${comm.id}/embedding`) : null;
    this.meter = TrafficMeter.of(comm);
    this.lossAcc = gpu.zeros([2], 'f32', 'pp.loss');
    this.norm = gpu.zeros([2], 'f32', 'pp.grad_norm');
    this.partNorm = gpu.zeros([2], 'f32', 'pp.stage_norm');
    this.hyper = gpu.zeros([8], 'f32', 'pp.adam_hyper');
  }

  /**
   * Runs optimizer step `step` (0-based): this rank's program of the schedule over the m
   * micro-batches, the embedding-group gradient sum, the global clip and AdamW.
   * @throws (rejects with) a peer's failure or timeout, or a schedule action out of order.
   */
  async step(step: number): Promise<PipelineStepRecord> {
    const { gpu, cfg, model } = this;
    this.meter.take();
    const t0 = wallMs(), timeline: Span[] = [];
    const span: SpanFn = (kind, start, label, action) => timeline.push({ kind, start: start - t0, end: wallMs() - t0, label, action });
    model.params.zeroGrad();
    gpu.clear(this.lossAcc);
    const batch = this.data.batch('train', cfg.batchSize, cfg.blockSize, cfg.seed, step, 0);
    await this.exec.run(batch.x, batch.y, this.lossAcc, span);

    let start = wallMs();
    if (this.embGroup) {
      // Sum of the embedding's and the head's gradients of the tied table, on both copies (they stay equal).
      const g = model.params.get(model.tied!).grad, host = (await gpu.read(g)) as Float32Array;
      await this.embGroup.allReduce(host, { op: 'sum' });
      gpu.write(g, host);
      span('comm', start, 'embedding allReduce');
    }
    start = wallMs();
    gradNorm(gpu, model.normGrads(), this.partNorm, 0);
    const own = (await gpu.read(this.partNorm))[0];
    const loss = model.holds(model.S - 1) ? (await gpu.read(this.lossAcc))[0] : 0;
    const sums = await this.scalars.allReduce(new Float32Array([own * own, loss]), { op: 'sum' });
    const norm = Math.sqrt(sums[0]);
    const scale = clipScale(norm, cfg.gradClip);
    span('comm', start, 'norm + loss allReduce');
    start = wallMs();
    const lr = lrAt(this.schedule, step);
    gpu.write(this.norm, new Float32Array([norm, scale]));
    gpu.write(this.hyper, packAdamHyper({ lr, beta1: cfg.beta1, beta2: cfg.beta2, eps: cfg.eps, step: step + 1 }));
    for (const p of model.params.params) {
      adamwUpdate(gpu, p.value, p.grad, p.m, p.v, this.hyper, this.norm, p.decay ? cfg.weightDecay : 0);
    }
    await gpu.sync();
    span('compute', start, 'AdamW');
    return { step, lr, loss: sums[1], gradNorm: norm, sent: this.meter.take(), timeline, origin: t0 };
  }

  /** This rank's gradients by parameter name (after a step; wte is the embedding-group sum on both ends). */
  async gradients(): Promise<Map<string, Float32Array>> {
    const flat = (await this.gpu.read(this.model.params.grads)) as Float32Array;
    return new Map(this.model.params.params.map((p) => [p.name, flat.slice(p.offset, p.offset + p.size)]));
  }

  /** This rank's parameters by name. */
  async parameters(): Promise<Map<string, Float32Array>> {
    const flat = (await this.gpu.read(this.model.params.values)) as Float32Array;
    return new Map(this.model.params.params.map((p) => [p.name, flat.slice(p.offset, p.offset + p.size)]));
  }

  /** Frees the parameters and step buffers. */
  destroy(): void {
    this.model.params.destroy();
    for (const t of [this.lossAcc, this.norm, this.partNorm, this.hyper]) t.release();
  }
}
