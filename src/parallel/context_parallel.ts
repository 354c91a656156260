/**
 * Context parallelism for the GPT of src/models/gpt.ts (Megatron-LM context parallelism;
 * picotron context_parallel.py): the cp ranks of a group each hold T/cp tokens of every
 * sequence of the batch and a full replica of the parameters. Every op but attention is
 * per-token, so a rank runs the model's own pieces on its own tokens only, over a RankContext
 * (rank_context.ts) that looks the position embedding up at their global positions and
 * replaces attention by
 * - `ring`: zig-zag ring attention (ring_attention.ts; rank r holds chunks r and 2cp−1−r of
 *   2cp), or
 * - `ulysses`: DeepSpeed-Ulysses all-to-alls around full-sequence flash attention over nh/cp
 *   heads (ulysses.ts; rank r holds tokens [r·T/cp, (r+1)·T/cp)).
 * Each rank's loss is the mean over its B·T/cp targets; all ranks count the same number, so the
 * average over ranks of losses and gradients is the mean over all tokens. Parameter gradients
 * are averaged with one allReduce of the flat gradient buffer (the data-parallel sync, which
 * plan.ts runs over the dp·cp ranks), then the single-rank AdamW runs on every rank.
 *
 * The step's loss is the 1-element average of the ranks' means (cost.ts's "loss average"):
 * with equal target counts per rank it is the mean over all tokens, so no count is exchanged.
 *
 * Elements sent per step and rank (b = batchSize, s = T/cp, L layers, m = gradAccum):
 * - ring:    m·L·(2bsC·(cp−1) [fwd K,V] + 2bsC·(cp−1) [bwd K,V] + 2bsC·cp [bwd dK,dV]) sends;
 * - ulysses: m·L·2·((cp−1)/cp·3bsC + (cp−1)/cp·bsC) in all-to-alls (fwd + bwd);
 * - both: a ring allReduce of the flat gradient buffer Ψ_flat (2Ψ_flat − chunk_r − chunk_{r+1})
 *   and one of the 1-element loss.
 */
import type { Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { Tape } from '../autograd/tape.ts';
import { RULES } from '../autograd/rules.ts';
import type { Communicator } from '../comm/communicator.ts';
import { type LanguageModel, type LayeredModel, runPieces } from '../models/model.ts';
import { RankContext } from './rank_context.ts';
import type { TextDataset } from '../data/dataset.ts';
import type { TrainConfig } from '../train/config.ts';
import { AdamW } from '../train/optimizer.ts';
import { lrAt, type ScheduleSpec, scheduleFromConfig, validateSchedule } from '../train/schedules.ts';
import type { StepRecord } from '../train/trainer.ts';
import type { CpKind } from './plan.ts';
import { subGroup } from './data_parallel.ts';
import { type Sent, TrafficMeter } from './traffic.ts';
import { zigzagPositions } from './ring_attention.ts';

/**
 * Global positions of rank r's T/cp tokens: zig-zag chunks for `ring`, the contiguous slice
 * [r·T/cp, (r+1)·T/cp) for `ulysses`.
 * @throws Error when T does not split (2cp chunks for ring, cp for Ulysses).
 */
export function cpPositions(kind: CpKind, r: number, cp: number, t: number): Int32Array {
  if (kind === 'ring') return zigzagPositions(r, cp, t);
  if (t % cp) throw new Error(`Ulysses: sequence ${t} is not divisible by cp ${cp}`);
  const n = t / cp;
  return Int32Array.from({ length: n }, (_, i) => r * n + i);
}

/** Rows `pos` of every sequence of a (B, T) host array, as (B, pos.length). */
export function takePositions(x: Int32Array, b: number, t: number, pos: Int32Array): Int32Array {
  const out = new Int32Array(b * pos.length);
  for (let i = 0; i < b; i++) for (let j = 0; j < pos.length; j++) out[i * pos.length + j] = x[i * t + pos[j]];
  return out;
}

/**
 * Checks a config for context parallelism of `kind` over cp ranks.
 * @throws Error naming the rule: GPT only; T divisible by 2cp (ring) or cp (Ulysses); heads
 *   divisible by cp (Ulysses); goldfish and NEFTune off.
 */
export function checkContextParallel(cfg: TrainConfig, cp: number, kind: CpKind): void {
  if (cfg.arch !== 'gpt') throw new Error(`context parallel: arch must be gpt, got '${cfg.arch}'`);
  if (kind !== 'ring' && kind !== 'ulysses') throw new Error(`context parallel: kind must be ring or ulysses, got '${kind}'`);
  cpPositions(kind, 0, cp, cfg.blockSize);
  if (kind === 'ulysses' && cfg.nHead % cp) throw new Error(`Ulysses: heads ${cfg.nHead} not divisible by cp ${cp}`);
  if (cfg.goldfishK || cfg.neftuneAlpha) throw new Error('context parallel: goldfishK and neftuneAlpha must be 0');
}

/** One context-parallel step as a rank saw it. */
export interface ContextParallelStepRecord extends StepRecord {
  /** Elements this rank sent during the step, keyed `group/op` (traffic.ts). */
  sent: Sent;
}

/** The step driver of one context-parallel rank (see the module doc). */
export class ContextParallelTrainer {
  readonly schedule: ScheduleSpec;
  readonly opt: AdamW;
  /** Global positions of this rank's tokens. */
  readonly positions: Int32Array;
  private readonly ctx: RankContext;
  private readonly grads: Communicator;
  private readonly lossGroup: Communicator;
  private readonly meter: TrafficMeter;
  private readonly paramGrads: Map<Tensor, Tensor>;

  /**
   * @param model a GPT built from the same seed on every rank (createModel).
   * @param comm the context-parallel group.
   * @throws Error from {@link checkContextParallel} or the schedule check.
   */
  constructor(readonly gpu: Gpu, readonly model: LanguageModel, readonly data: TextDataset, readonly cfg: TrainConfig, readonly comm: Communicator, readonly kind: CpKind) {
    checkContextParallel(cfg, comm.size, kind);
    this.schedule = scheduleFromConfig(cfg);
    validateSchedule(this.schedule, cfg.steps);
    this.positions = cpPositions(kind, comm.rank, comm.size, cfg.blockSize);
    this.opt = new AdamW(gpu, model.params, cfg);
    const self = comm.newGroup([comm.ranks[comm.rank]], `${comm.id}/self`);
    this.ctx = new RankContext({ tp: self, vocabSize: model.cfg.vocabSize, context: { group: subGroup(comm, 'attn'), kind, positions: this.positions } });
    this.grads = subGroup(comm, 'grads');
    this.lossGroup = subGroup(comm, 'loss');
    this.meter = TrafficMeter.of(comm);
    this.paramGrads = model.params.gradMap();
  }

  /**
   * Runs optimizer step `step` (0-based): gradAccum micro-batches of this rank's tokens of the
   * single-rank Trainer's batch, the gradient allReduce (avg), clip + AdamW. Resolves to the
   * global mean loss, the grad norm before clipping and this rank's traffic.
   * @throws (rejects with) a collective's error, e.g. a peer that timed out.
   */
  async step(step: number): Promise<ContextParallelStepRecord> {
    const { gpu, model, cfg } = this;
    const b = cfg.batchSize, t = cfg.blockSize;
    this.meter.take();
    model.params.zeroGrad();
    let loss = 0;
    for (let micro = 0; micro < cfg.gradAccum; micro++) {
      const batch = this.data.batch('train', b, t, cfg.seed, step, micro);
      const tape = new Tape(gpu, this.paramGrads);
      const x = takePositions(batch.x, b, t, this.positions), y = takePositions(batch.y, b, t, this.positions);
      const input = { hostTokens: x, tokens: null, targets: null, hostTargets: y };
      const lossT = (await runPieces(model as LayeredModel, this.ctx, tape, input, b, this.positions.length, { gradScale: 1 / cfg.gradAccum })).loss!;
      await tape.backwardAsync(RULES);
      loss += (await gpu.read(lossT))[0] / cfg.gradAccum;
      tape.dispose();
    }
    const flat = await gpu.read(model.params.grads) as Float32Array;
    await this.grads.allReduce(flat, { op: 'avg' });
    gpu.write(model.params.grads, flat);
    const lr = lrAt(this.schedule, step);
    this.opt.step(lr, step + 1);
    const global = (await this.lossGroup.allReduce(new Float32Array([loss]), { op: 'avg' }))[0];
    const gradNorm = (await gpu.read(this.opt.norm))[0];
    return { step, lr, loss: global, gradNorm, sent: this.meter.take() };
  }

  /** The last step's averaged flat gradient (Ψ_flat, before clipping; equal on every rank). */
  async gradients(): Promise<Float32Array> {
    return await this.gpu.read(this.model.params.grads) as Float32Array;
  }

  /** The flat parameter buffer (equal on every rank). */
  async parameters(): Promise<Float32Array> {
    return await this.gpu.read(this.model.params.values) as Float32Array;
  }
}
