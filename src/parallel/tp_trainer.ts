/**
 * The step of a tensor-parallel rank (a ModelStages over a RankContext with tp > 1): gradAccum
 * micro-batches of the single-rank Trainer's batch (every rank sees all of it), backwardAsync,
 * under SP the partial-gradient allReduce (sequence_parallel.ts), then global-norm clipping from
 * one allReduce of the sharded squared-norm partial (replicated parameters counted once,
 * locally) and AdamW's update kernel on the rank's own ParamStore (Megatron-LM's
 * `clip_grad_norm_fp32` over the model-parallel group).
 */
import type { Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { Tape } from '../autograd/tape.ts';
import { RULES } from '../autograd/rules.ts';
import { adamwUpdate, packAdamHyper } from '../kernels/adamw.ts';
import type { Communicator } from '../comm/communicator.ts';
import type { TextDataset } from '../data/dataset.ts';
import type { TrainConfig } from '../train/config.ts';
import { lrAt, type ScheduleSpec, scheduleFromConfig, validateSchedule } from '../train/schedules.ts';
import type { StepRecord } from '../train/trainer.ts';
import { clipScale } from '../train/optimizer.ts';
import { subGroup } from './data_parallel.ts';
import { type Sent, TrafficMeter } from './traffic.ts';
import { allReduceSequenceParallelGrads } from './sequence_parallel.ts';
import { shardKind } from './tp_table.ts';
import type { ModelStages } from './stages.ts';

/** One tensor-parallel step as a rank saw it. */
export interface TensorParallelStepRecord extends StepRecord {
  /** Elements this rank sent during the step, keyed `group/op` (traffic.ts). */
  sent: Sent;
}

/** The step driver of one tensor-parallel rank (see the module doc). */
export class TensorParallelTrainer {
  readonly schedule: ScheduleSpec;
  private readonly meter: TrafficMeter;
  private readonly normGroup: Communicator;
  private readonly spGroup: Communicator;
  private readonly hyper: Tensor;
  private readonly norm: Tensor;

  private readonly group: Communicator;

  /** @throws Error for goldfish masking or NEFTune (not supported here) or a bad schedule. */
  constructor(readonly gpu: Gpu, readonly model: ModelStages, readonly data: TextDataset, readonly cfg: TrainConfig) {
    if (cfg.goldfishK || cfg.neftuneAlpha) throw new Error('tensor parallel: goldfishK and neftuneAlpha must be 0 (not implemented for sharded models)');
    this.schedule = scheduleFromConfig(cfg);
    validateSchedule(this.schedule, cfg.steps);
    this.group = model.ctx.o.tp;
    this.meter = TrafficMeter.of(this.group);
    this.normGroup = subGroup(this.group, 'norm');
    this.spGroup = subGroup(this.group, 'sp-grads');
    this.hyper = gpu.zeros([8], 'f32', 'tp.adam_hyper');
    this.norm = gpu.zeros([2], 'f32', 'tp.grad_norm');
  }

  /**
   * Runs optimizer step `step` (0-based); resolves to the mean loss (equal on every rank), the
   * global grad norm before clipping and this rank's traffic.
   * @throws (rejects with) a collective's error, e.g. a peer that timed out.
   */
  async step(step: number): Promise<TensorParallelStepRecord> {
    const { gpu, model, cfg } = this;
    this.meter.take();
    model.params.zeroGrad();
    let loss = 0;
    for (let micro = 0; micro < cfg.gradAccum; micro++) {
      const batch = this.data.batch('train', cfg.batchSize, cfg.blockSize, cfg.seed, step, micro);
      const tape = new Tape(gpu, model.gradMap);
      const out = await model.forward(tape, batch.x, batch.y, cfg.batchSize, cfg.blockSize, 1 / cfg.gradAccum);
      loss += (await gpu.read(out.loss!))[0] / cfg.gradAccum;
      await tape.backwardAsync(RULES);
      tape.dispose();
    }
    if (model.ctx.sequenceParallel) await allReduceSequenceParallelGrads(gpu, model.params, this.spGroup);
    const gradNorm = await this.globalNorm();
    const scale = clipScale(gradNorm, cfg.gradClip);
    const lr = lrAt(this.schedule, step);
    gpu.write(this.norm, new Float32Array([gradNorm, scale]));
    gpu.write(this.hyper, packAdamHyper({ lr, beta1: cfg.beta1, beta2: cfg.beta2, eps: cfg.eps, step: step + 1 }));
    for (const p of model.params.params) adamwUpdate(gpu, p.value, p.grad, p.m, p.v, this.hyper, this.norm, p.decay ? cfg.weightDecay : 0);
    return { step, lr, loss, gradNorm, sent: this.meter.take() };
  }

  /** ‖g‖₂ of the whole model: Σ over shards of sharded parameters (one 1-element allReduce) + replicated ones once. */
  private async globalNorm(): Promise<number> {
    const all = await this.gpu.read(this.model.params.grads) as Float32Array;
    let sharded = 0, replicated = 0;
    for (const p of this.model.params.params) {
      let s = 0;
      for (let i = p.offset; i < p.offset + p.size; i++) s += all[i] * all[i];
      if (shardKind(p.name) === 'replicated') replicated += s;
      else sharded += s;
    }
    const sum = await this.normGroup.allReduce(new Float32Array([sharded]));
    return Math.sqrt(sum[0] + replicated);
  }

  /** This rank's shard of every gradient (of the last step, before clipping), by parameter name. */
  gradients(): Promise<Record<string, Float32Array>> {
    return this.byName(this.model.params.grads);
  }

  /** This rank's shard of every parameter, by name. */
  parameters(): Promise<Record<string, Float32Array>> {
    return this.byName(this.model.params.values);
  }

  private async byName(flat: Tensor): Promise<Record<string, Float32Array>> {
    const all = await this.gpu.read(flat) as Float32Array;
    return Object.fromEntries(this.model.params.params.map((p) => [p.name, all.slice(p.offset, p.offset + p.size)]));
  }

  /** Frees the optimizer's small tensors (the model's ParamStore is the caller's). */
  dispose(): void {
    this.hyper.release();
    this.norm.release();
  }
}
