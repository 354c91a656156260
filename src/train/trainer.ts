/**
 * The training loop's GPU side: one optimizer step (micro-batches with gradient
 * accumulation, backward, clip, AdamW), evaluation on fixed validation batches, and
 * sampling. Losses stay on the GPU in a history buffer that is read once per log interval,
 * so the CPU keeps encoding the next step while the GPU runs this one.
 */
import type { Gpu } from '../gpu/context.ts';
import { Tensor } from '../gpu/tensor.ts';
import { Tape } from '../autograd/tape.ts';
import { RULES } from '../autograd/rules.ts';
import { axpy } from '../kernels/elementwise.ts';
import { gradNorm } from '../kernels/adamw.ts';
import type { LanguageModel } from '../models/model.ts';
import { type Batch, microBatchRows, type TextDataset } from '../data/dataset.ts';
import { MixtureDataset } from '../data/mixture.ts';
import type { TrainConfig } from './config.ts';
import { AdamW } from './optimizer.ts';
import { lrAt, scheduleFromConfig, type ScheduleSpec, validateSchedule } from './schedules.ts';
import { goldfishMask } from './goldfish.ts';
import { mixSeed, Random } from '../util/random.ts';
import { meanLoss } from './evaluate.ts';
import { type LossScaler, lossScalerFor } from './loss_scale.ts';
import { sampleTokens } from './sample.ts';
import { autocastOf, checkPrecision } from '../autograd/autocast.ts';
import { withTrainDepth } from '../models/recurrence.ts';

/** Per-step values read back from the GPU. */
export interface StepRecord {
  step: number;
  loss: number;
  gradNorm: number;
  lr: number;
  /** f16-mixed: the loss scale this step's backward used, and whether its update was skipped (overflow). */
  lossScale?: number;
  skipped?: boolean;
}

/** Salt of the NEFTune noise seeds, so they are unrelated to the batch sampler's. */
const NEFTUNE_SALT = 0x4e_45_46_54;

/** A single corpus or a weighted mixture (both draw batches as pure functions of the step). */
export type TrainData = TextDataset | MixtureDataset;

export class Trainer {
  readonly opt: AdamW;
  /** (B, T) i32: the inputs of the micro-batch last encoded (tests read it back to check replay). */
  readonly tokens: Tensor;
  private readonly targets: Tensor;
  /**
   * Called with every training micro-batch as it is written to the GPU (host copies): micro-batch
   * `micro` holds rows [micro·B, (micro+1)·B) of the step's global batch, so a caller can record
   * the exact data order; the batch must not be modified.
   */
  onBatch: ((step: number, micro: number, batch: Batch) => void) | null = null;
  private readonly lossAcc: Tensor;
  private history: Tensor;
  private pending: { step: number; lr: number; lossScale?: number; skipped?: boolean }[] = [];
  /** Dynamic loss scaling under f16-mixed (loss_scale.ts), else null. */
  readonly scaler: LossScaler | null;
  private readonly paramGrads: Map<Tensor, Tensor>;
  /** The LR schedule, fixed at construction (a re-warm's start is resolved by then). */
  readonly schedule: ScheduleSpec;

  /** @throws Error when the config's schedule does not fit the run (see validateSchedule). */
  constructor(readonly gpu: Gpu, readonly model: LanguageModel, readonly data: TrainData, readonly cfg: TrainConfig) {
    this.schedule = scheduleFromConfig(cfg);
    validateSchedule(this.schedule, cfg.steps);
    const { batchSize: b, blockSize: t } = cfg;
    this.tokens = gpu.zeros([b, t], 'i32', 'tokens');
    this.targets = gpu.zeros([b, t], 'i32', 'targets');
    this.lossAcc = gpu.zeros([2], 'f32', 'loss_acc');
    this.history = gpu.zeros([Math.max(1, cfg.logInterval) * 2], 'f32', 'loss_history');
    this.opt = new AdamW(gpu, cfg);
    this.paramGrads = model.params.gradMap();
    checkPrecision(gpu, cfg.precision);
    this.scaler = lossScalerFor(cfg);
  }

  /** The learning rate at `step` (0-based). */
  lrAt(step: number): number {
    return lrAt(this.schedule, step);
  }

  /**
   * Encodes optimizer step `step` (0-based): gradAccum micro-batches, then clip + AdamW.
   * Nothing is read back (the promise resolves once the step is encoded, not when the GPU is
   * done) except under f16-mixed, whose loss scaler reads ‖g‖ to decide whether the update
   * applies (AdamW.stepScaled); call {@link drain} to collect the losses.
   * @throws Error from LossScaler.update when the loss scale underflows (a diverged run).
   */
  async step(step: number): Promise<void> {
    const { gpu, scaler } = this;
    const lossScale = scaler?.scale;
    await this.gradients(step, true);
    const lr = this.lrAt(step);
    let skipped: boolean | undefined;
    if (scaler) skipped = !scaler.update(await this.opt.stepScaled(this.model.params, lr, step + 1, lossScale!));
    else this.opt.step(this.model.params, lr, step + 1);
    const slot = this.pending.length;
    if (slot * 2 + 2 > this.history.size) this.growHistory();
    gpu.copy(this.slice(this.lossAcc, 0, 1), this.slice(this.history, slot * 2, 1));
    gpu.copy(this.slice(this.opt.norm, 0, 1), this.slice(this.history, slot * 2 + 1, 1));
    this.pending.push(scaler ? { step, lr, lossScale, skipped } : { step, lr });
  }

  /**
   * Encodes step `step`'s micro-batches: the mean loss into lossAcc, the gradients into the store
   * (times the loss scale when `record`, a training step, runs under f16-mixed; a probe's are unscaled).
   */
  private async gradients(step: number, record: boolean): Promise<void> {
    // A recurrent-depth model runs the step's drawn r in every micro-batch (models/recurrence.ts).
    await withTrainDepth(this.model, this.cfg, step, () => this.microBatches(step, record));
  }

  private async microBatches(step: number, record: boolean): Promise<void> {
    const { gpu, model, cfg } = this;
    const { batchSize: b, blockSize: t, gradAccum } = cfg;
    model.params.zeroGrad();
    gpu.clear(this.lossAcc);
    for (let micro = 0; micro < gradAccum; micro++) {
      // Rows [micro·B, (micro+1)·B) of the step's one global batch (data/dataset.ts, docs/design.md#batch-order).
      const { from, to } = microBatchRows(micro, b);
      const batch = this.data.rows('train', t, cfg.seed, step, from, to);
      if (record) this.onBatch?.(step, micro, batch);
      gpu.write(this.tokens, batch.x);
      // Goldfish masking touches training targets only; evaluate() always scores every token.
      gpu.write(this.targets, goldfishMask(batch.y, batch.x, t, cfg.goldfishK, cfg.goldfishH));
      const tape = new Tape(gpu, this.paramGrads);
      tape.autocast = autocastOf(cfg.precision);
      // NEFTune noise only in training passes, seeded per (seed, step) and indexed by global row, so
      // resumes replay it and every split of the global batch draws the same noise per row.
      const neftune = cfg.neftuneAlpha > 0
        ? { alpha: cfg.neftuneAlpha, seed: mixSeed(cfg.seed, NEFTUNE_SALT, step, 0), row: from }
        : undefined;
      const { loss } = await model.forward(tape, this.tokens, batch.x, this.targets, b, t, {
        gradScale: (record ? this.scaler?.scale ?? 1 : 1) / gradAccum,
        neftune,
        recompute: cfg.recompute,
      });
      axpy(gpu, 1 / gradAccum, loss!, this.lossAcc);
      await tape.backwardAsync(RULES); // asynchronous only when a recomputed block is on the tape
      tape.dispose();
    }
  }

  /** Waits for the GPU and returns the records of every step encoded since the last drain. */
  async drain(): Promise<StepRecord[]> {
    if (!this.pending.length) return [];
    const h = await this.gpu.read(this.history);
    const out = this.pending.map((p, i) => ({ ...p, loss: h[i * 2], gradNorm: h[i * 2 + 1] }));
    this.pending = [];
    return out;
  }

  /**
   * The loss and gradient norm (before clipping) step `step` would report, computed from the
   * current state without updating it (the gradients are scratch, zeroed by every step): what
   * a run checks before saving a state (src/train/finite.ts). Call after {@link drain}.
   */
  async probe(step: number): Promise<{ loss: number; gradNorm: number }> {
    const { gpu } = this;
    await this.gradients(step, false);
    const norm = gpu.zeros([2], 'f32', 'probe_norm');
    gradNorm(gpu, this.model.params.grads, norm, 0);
    const [loss, g] = [(await gpu.read(this.lossAcc))[0], (await gpu.read(norm))[0]];
    norm.release();
    return { loss, gradNorm: g };
  }

  /** Names of the corpora `evaluate(split, source)` can score (one for a single file). */
  get sourceNames(): string[] {
    return this.data instanceof MixtureDataset ? this.data.names : [this.cfg.data];
  }

  /**
   * Mean loss over `cfg.evalBatches` fixed batches of `split` (the same batches every call):
   * of the whole mixture, or with `source` of that corpus alone (per-corpus validation, e.g.
   * forgetting of the old corpus in continual pre-training).
   * @throws Error when `source` is not an index of {@link sourceNames}.
   */
  async evaluate(split: 'train' | 'val' = 'val', source?: number): Promise<number> {
    const data = source === undefined ? this.data : this.sourceData(source);
    return await meanLoss(this.gpu, this.model, data, this.cfg, split, { tokens: this.tokens, targets: this.targets });
  }

  /**
   * Generates `n` tokens after `prompt` (host ids) with the run's temperature, top-k and
   * precision (train/sample.ts): through a KV cache for the attention architectures
   * (docs/design.md#decoding-with-a-kv-cache), by recomputing the context for the recurrent ones; the same tokens
   * either way for one seed.
   */
  sample(
    prompt: Int32Array,
    n: number,
    rng: Random,
    temperature = this.cfg.temperature,
    topK = this.cfg.topK,
  ): Promise<Int32Array> {
    return sampleTokens(this.gpu, this.model, prompt, n, rng, {
      temperature,
      topK,
      autocast: autocastOf(this.cfg.precision),
      topkAttention: this.cfg.topkAttention || null,
    });
  }

  /** Loss of `split` on every corpus, in {@link sourceNames} order. */
  async evaluateSources(split: 'train' | 'val' = 'val'): Promise<number[]> {
    const out: number[] = [];
    for (let k = 0; k < this.sourceNames.length; k++) out.push(await this.evaluate(split, k));
    return out;
  }

  /**
   * Hands the trainer's own buffers back to the pool (batch, loss and history tensors, the
   * optimizer's norm and hyperparameters); the model and its parameters, gradients and moments
   * are the caller's. For runs that build trainer after trainer on one model (experiments'
   * branches); the trainer must not be used after.
   */
  release(): void {
    for (const t of [this.tokens, this.targets, this.lossAcc, this.history]) t.release();
    this.opt.dispose();
  }

  private sourceData(k: number): TextDataset {
    const n = this.sourceNames.length;
    if (!Number.isInteger(k) || k < 0 || k >= n) {
      throw new Error(`evaluate: source ${k} does not exist; allowed 0 … ${n - 1} (${this.sourceNames.join(', ')})`);
    }
    return this.data instanceof MixtureDataset ? this.data.sources[k] : this.data;
  }

  private slice(t: Tensor, start: number, len: number): Tensor {
    return t.range(start, len, `${t.label}[${start}]`);
  }

  private growHistory(): void {
    const bigger = this.gpu.zeros([this.history.size * 2], 'f32', 'loss_history');
    this.gpu.copy(this.history, this.slice(bigger, 0, this.history.size));
    this.history.release();
    this.history = bigger;
  }
}

export { pick } from './sample.ts';
