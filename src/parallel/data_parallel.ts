/**
 * Data parallelism (picotron's data_parallel.py; PyTorch DDP, Li et al. arXiv 2006.15704):
 * every rank holds the whole model, trains on its own rows of the global batch and averages
 * gradients with an allReduce, so after the step every rank holds the same weights as a
 * single-rank run on the whole batch would.
 *
 * - Batch: the global micro-batch (B, T) is the one the single-rank Trainer draws,
 *   `dataset.batch('train', B, T, seed, step, micro)`; rank r of d takes rows
 *   [r·B/d, (r+1)·B/d). Each rank's loss is the mean over its rows, so the average over ranks
 *   of losses and gradients is the global mean — exact only when every rank counts the same
 *   number of targets, which is why goldfish masking (uneven masks) is refused.
 * - Gradient accumulation: micro-batches before the last only accumulate locally (DDP's
 *   `no_sync`); the last one's backward launches the bucketed allReduce (op avg) as each
 *   bucket's gradients become final (see buckets.ts for what overlaps).
 * - Optimizer: the unchanged AdamW of src/train/optimizer.ts on the averaged gradients, so
 *   global-norm clipping and per-parameter weight decay are those of the single-rank run.
 *
 * Communication per step and rank (ring allReduce of each bucket of n_k elements, chunks from
 * `chunkOffsets(n_k, d)`): Σ_k (2·n_k − chunk_r − chunk_{r+1}) elements, i.e. 2(d−1)/d·Ψ_flat
 * when every bucket splits evenly (docs/design.md §17), plus one 1-element allReduce for the loss.
 */
import type { Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { Tape } from '../autograd/tape.ts';
import { RULES } from '../autograd/rules.ts';
import type { Communicator } from '../comm/communicator.ts';
import type { LanguageModel } from '../models/model.ts';
import type { TextDataset } from '../data/dataset.ts';
import type { TrainConfig } from '../train/config.ts';
import { AdamW } from '../train/optimizer.ts';
import { lrAt, scheduleFromConfig, type ScheduleSpec, validateSchedule } from '../train/schedules.ts';
import type { StepRecord } from '../train/trainer.ts';
import { LocalBatches, replicaForward } from './local_batches.ts';
import { backwardWithBuckets, type Bucket, LoggingTape, type OverlapStats, planBuckets, sliceOf } from './buckets.ts';
import { type Sent, TrafficMeter } from './traffic.ts';

/** Options shared by data parallelism and ZeRO. */
export interface DataParallelOptions {
  /** Gradient bucket size in bytes (default 1 MiB, rounded up to whole parameters) or 'layer'. */
  bucketBytes?: number | 'layer';
}

/** One step as a data-parallel rank saw it. */
export interface ParallelStepRecord extends StepRecord {
  /** Elements this rank sent during the step, keyed `group/op` (see traffic.ts). */
  sent: Sent;
  /** Bucket launches of the step's last backward. */
  overlap: OverlapStats;
}

/**
 * Checks that a config can be split over `dp` ranks.
 * @throws Error naming the violated rule: batchSize divisible by dp, goldfish masking off.
 */
export function checkDataParallel(cfg: TrainConfig, dp: number): void {
  if (!Number.isInteger(dp) || dp < 1) throw new Error(`data parallel: dp must be a positive integer, got ${dp}`);
  if (cfg.batchSize % dp) {
    throw new Error(
      `data parallel: batchSize (${cfg.batchSize}) must be divisible by dp (${dp}); each rank takes batchSize/dp rows`,
    );
  }
  if (cfg.goldfishK) {
    throw new Error(
      'data parallel: goldfishK must be 0; masked targets differ per rank, so averaging per-rank means would not give the global mean',
    );
  }
}

/** Group ids derived from the dp group, one per purpose, so each keeps its own call order and traffic count. */
export function subGroup(comm: Communicator, purpose: string): Communicator {
  return comm.newGroup([...comm.ranks], `${comm.id}/${purpose}`);
}

/**
 * One data-parallel rank: the model replica, its rows of the data, the bucketed gradient
 * allReduce and the single-rank AdamW. Every rank of `comm` must construct it with the same
 * model seed and config and call {@link step} with the same steps.
 */
export class DataParallelTrainer {
  readonly buckets: Bucket[];
  readonly opt: AdamW;
  readonly schedule: ScheduleSpec;
  readonly batches: LocalBatches;
  private readonly gradGroup: Communicator;
  private readonly lossGroup: Communicator;
  private readonly meter: TrafficMeter;
  private readonly paramGrads: Map<Tensor, Tensor>;

  /**
   * @param comm the dp group; its size d must divide cfg.batchSize.
   * @throws Error from {@link checkDataParallel}, from the schedule check, or for a bad bucket size.
   */
  constructor(
    readonly gpu: Gpu,
    readonly model: LanguageModel,
    data: TextDataset,
    readonly cfg: TrainConfig,
    readonly comm: Communicator,
    opts: DataParallelOptions = {},
  ) {
    this.schedule = scheduleFromConfig(cfg);
    validateSchedule(this.schedule, cfg.steps);
    checkDataParallel(cfg, comm.size);
    this.batches = new LocalBatches(gpu, data, cfg, comm.rank, comm.size, replicaForward(gpu, model, cfg));
    this.buckets = planBuckets(model.params, opts.bucketBytes ?? 1 << 20);
    this.opt = new AdamW(gpu, cfg);
    this.gradGroup = subGroup(comm, 'grads');
    this.lossGroup = subGroup(comm, 'loss');
    this.meter = TrafficMeter.of(comm);
    this.paramGrads = model.params.gradMap();
  }

  /**
   * Runs optimizer step `step` (0-based) on this rank: gradAccum micro-batches of its rows,
   * the overlapped bucket allReduce (avg) in the last backward, clip + AdamW. Resolves to the
   * global mean loss, the global grad norm (before clipping) and this rank's traffic.
   * @throws (rejects with) a collective's error, e.g. a peer that timed out.
   */
  async step(step: number): Promise<ParallelStepRecord> {
    const { gpu, model, cfg } = this;
    this.meter.take();
    model.params.zeroGrad();
    this.batches.startStep();
    let overlap: OverlapStats = { launchedDuringBackward: 0, order: [] };
    for (let micro = 0; micro < cfg.gradAccum; micro++) {
      const last = micro === cfg.gradAccum - 1;
      const tape = last ? new LoggingTape(gpu, this.paramGrads) : new Tape(gpu, this.paramGrads);
      await this.batches.forward(tape, step, micro);
      if (last) {
        overlap = await backwardWithBuckets(
          gpu,
          model.params,
          this.buckets,
          tape as LoggingTape,
          RULES,
          async (b, host) => {
            await this.gradGroup.allReduce(host, { op: 'avg' });
            gpu.write(sliceOf(model.params.grads, b.start, b.end), host);
          },
        );
      } else await tape.backwardAsync(RULES);
      tape.dispose();
    }
    const lr = lrAt(this.schedule, step);
    this.opt.step(this.model.params, lr, step + 1);
    const loss = await this.batches.globalLoss(this.lossGroup);
    const gradNorm = (await gpu.read(this.opt.norm))[0];
    return { step, lr, loss, gradNorm, sent: this.meter.take(), overlap };
  }

  /** The last step's averaged gradient, flat (Ψ_flat elements, before clipping; every rank holds all of it). */
  async gradients(): Promise<Float32Array> {
    return await this.gpu.read(this.model.params.grads) as Float32Array;
  }

  /** The flat parameter buffer (every rank holds all of it). */
  async parameters(): Promise<Float32Array> {
    return await this.gpu.read(this.model.params.values) as Float32Array;
  }
}
