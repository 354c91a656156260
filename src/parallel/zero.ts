/**
 * ZeRO stages 1–3 (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion
 * Parameter Models", arXiv 1910.02054; picotron's and FSDP's flat-parameter sharding) on top of
 * data parallelism (data_parallel.ts: same rows per rank, same loss averaging).
 *
 * Sharding (zero_pieces.ts): every bucket k of the flat buffers is split into d pieces of c_k
 * elements; rank r owns piece r of every bucket, and its AdamW m, v (and, by stage, its reduced
 * gradient and values) live in shard buffers of C = Σ_k c_k elements.
 *
 * - Stage 1 (P_os): local gradients accumulate over micro-batches in the full gradient buffer;
 *   the last backward reduce-scatters (avg) each bucket as soon as it is final, the rank's
 *   reduced piece lands back in its own range of that buffer, the rank updates its pieces and
 *   an all-gather per bucket returns the updated parameters to everyone.
 * - Stage 2 (P_os+g): every micro-batch's backward reduce-scatters and the rank keeps only its
 *   pieces (accumulated on the host, then in the shard buffer). There is no full gradient
 *   buffer: gradients live per layer in zero_units.ts's working slot, reused layer after layer
 *   once a bucket's readback is encoded.
 * - Stage 3 (P_os+g+p): the values live as this rank's pieces only (a shard buffer of C
 *   elements, which AdamW updates in place) plus zero_units.ts's working buffers. A micro-batch's
 *   forward all-gathers the resident units (embeddings, final norm) first and each block's unit
 *   when the forward reaches that block (ForwardOptions.beforeBlock), writing it into the working
 *   slot at the first read of one of its weights, so host and slot hold one layer at a time;
 *   backward gathers each layer again just before the first rule that reads it
 *   (Tape.backwardAsync's beforeNode) and zeroes its gradient region. No all-gather after the
 *   update.
 * - Clipping: each rank sums the squares of its reduced pieces, an allReduce (sum) of that one
 *   number gives ‖g‖², and the clip scale min(1, clip/(‖g‖+1e-6)) is that of the single-rank run.
 *
 * Elements sent per step and rank (ring algorithms, C = Σ_k c_k): reduce-scatter
 * (d−1)·C per reduce-scatter pass, all-gather (d−1)·C per gather pass; stage 1 = 2(d−1)·C,
 * stage 2 = (A+1)(d−1)·C, stage 3 = 3A(d−1)·C for A micro-batches, plus 1 element for the
 * loss and 1 for the norm to each ring neighbour step — ≈ 2(d−1)/d·Ψ and 3(d−1)/d·Ψ (docs/design.md §17).
 *
 * Memory (fp32, Ψ = flat elements, C = shard, W = resident + largest layer): the ParamStore's
 * flat AdamW moments are freed at every stage (m, v live in shard buffers, 8C bytes); stage 1
 * keeps 4Ψ of values and 4Ψ of gradients, stage 2 4Ψ of values and 4(C + W) of gradients,
 * stage 3 4(C + W) of each. {@link ZeroTrainer.memory} sums the buffers actually allocated.
 */
import type { Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { Tape } from '../autograd/tape.ts';
import { RULES } from '../autograd/rules.ts';
import type { Communicator } from '../comm/communicator.ts';
import type { LanguageModel } from '../models/model.ts';
import type { TextDataset } from '../data/dataset.ts';
import type { TrainConfig } from '../train/config.ts';
import { lrAt, scheduleFromConfig, type ScheduleSpec, validateSchedule } from '../train/schedules.ts';
import {
  backwardWithBuckets,
  type Bucket,
  type BucketHooks,
  LoggingTape,
  type OverlapStats,
  planBuckets,
  sliceOf,
} from './buckets.ts';
import { LayerUnits } from './zero_units.ts';
import { type Piece, type ZeroMemory, ZeroShards } from './zero_pieces.ts';
import { checkDataParallel, type DataParallelOptions, type ParallelStepRecord, subGroup } from './data_parallel.ts';
import { LocalBatches, replicaForward } from './local_batches.ts';
import type { ZeroSplit } from './zero_split.ts';
import { TrafficMeter } from './traffic.ts';
import { AdamW } from '../train/optimizer.ts';
import { meanLoss } from '../train/evaluate.ts';

export type ZeroStage = 1 | 2 | 3;

export interface ZeroOptions extends DataParallelOptions {
  stage: ZeroStage;
  /** A tensor- and / or context-parallel model shard (pp 1) instead of a whole-model replica (zero_split.ts). */
  split?: ZeroSplit;
}

export class ZeroTrainer {
  readonly buckets: Bucket[];
  readonly pieces: Piece[];
  readonly schedule: ScheduleSpec;
  readonly stage: ZeroStage;
  /** Shard length Σ c_k. */
  readonly shard: number;
  /** Stages 2–3: the per-layer working buffers. */
  private readonly units: LayerUnits | null;
  private readonly batches: LocalBatches;
  /** This rank's pieces: AdamW m, v; from stage 2 the reduced gradient, at stage 3 the values. */
  private readonly shards: ZeroShards;
  /** optimizer.ts's AdamW over this rank's pieces. */
  private readonly opt: AdamW;
  private readonly groups: Record<'grads' | 'params' | 'scalars' | 'eval', Communicator>;
  private readonly meter: TrafficMeter;
  private readonly paramGrads: Map<Tensor, Tensor>;
  private readonly split: ZeroSplit | null;

  /**
   * Every rank of `comm` builds the same model (same seed) first; {@link ZeroTrainer.create}
   * then frees what the stage shards away.
   */
  private constructor(
    readonly gpu: Gpu,
    readonly model: LanguageModel,
    data: TextDataset,
    readonly cfg: TrainConfig,
    readonly comm: Communicator,
    opts: ZeroOptions,
    initial: Float32Array,
  ) {
    this.stage = opts.stage;
    this.schedule = scheduleFromConfig(cfg);
    validateSchedule(this.schedule, cfg.steps);
    const split = this.split = opts.split ?? null;
    const dp = split?.dp ?? { index: comm.rank, size: comm.size };
    checkDataParallel(cfg, dp.size);
    this.batches = split
      ? new LocalBatches(gpu, data, cfg, dp.index, dp.size, split.forward, split.positions)
      : new LocalBatches(gpu, data, cfg, dp.index, dp.size, replicaForward(gpu, model, cfg));
    const store = model.params;
    this.buckets = planBuckets(store, opts.bucketBytes ?? (opts.stage === 1 ? 1 << 20 : 'layer'));
    const sharded = { grads: this.stage > 1, values: this.stage === 3 };
    this.shards = new ZeroShards(gpu, store, this.buckets, comm, sharded, initial);
    this.pieces = this.shards.pieces;
    this.shard = this.shards.shard;
    this.opt = new AdamW(gpu, cfg);
    const why = `ZeRO-${this.stage} keeps AdamW's moments sharded (zero.ts)`;
    store.rehome('m', null, [], why);
    store.rehome('v', null, [], why);
    this.units = this.stage > 1 ? new LayerUnits(gpu, store, this.buckets, this.stage === 3) : null;
    this.groups = {
      grads: subGroup(comm, 'grads'),
      params: subGroup(comm, 'params'),
      scalars: subGroup(split?.world ?? comm, 'scalars'),
      eval: subGroup(comm, 'eval'),
    };
    this.meter = TrafficMeter.of(comm);
    // After the rehoming above: a split model's bias columns are views of the working buffers.
    this.paramGrads = split ? split.gradMap() : store.gradMap();
  }

  /**
   * Builds the trainer over `model` (built from the same seed on every rank of `comm`) and frees
   * what its stage shards: the flat AdamW moments always, the flat gradients from stage 2 and
   * the flat values at stage 3.
   * @throws Error for a stage other than 1, 2, 3, stage 2–3 with byte-sized buckets (they need
   *   'layer' units), and the errors of LocalBatches (batch not divisible by the ranks, goldfish).
   */
  static async create(
    gpu: Gpu,
    model: LanguageModel,
    data: TextDataset,
    cfg: TrainConfig,
    comm: Communicator,
    opts: ZeroOptions,
  ): Promise<ZeroTrainer> {
    if (![1, 2, 3].includes(opts.stage)) throw new Error(`ZeRO: stage must be 1, 2 or 3, got ${opts.stage}`);
    if (opts.stage > 1 && opts.bucketBytes !== undefined && opts.bucketBytes !== 'layer') {
      throw new Error(
        `ZeRO-${opts.stage}: buckets must be 'layer' (got ${opts.bucketBytes} bytes); gradients and values are kept one layer at a time`,
      );
    }
    const initial = opts.stage === 3 ? (await gpu.read(model.params.values) as Float32Array) : new Float32Array(0);
    return new ZeroTrainer(gpu, model, data, cfg, comm, opts, initial);
  }

  /**
   * Optimizer step `step` (0-based) on this rank; see the module doc for what each stage sends.
   * Resolves to the global mean loss, the global grad norm and this rank's traffic.
   * @throws (rejects with) a collective's error.
   */
  async step(step: number): Promise<ParallelStepRecord> {
    const { gpu, model, cfg, stage, units } = this;
    this.meter.take();
    this.batches.startStep();
    if (!units) model.params.zeroGrad(); // stages 2–3: each backward zeroes a unit's gradients as it opens it
    let overlap: OverlapStats = { launchedDuringBackward: 0, order: [] };
    const own = stage === 3 ? await this.shards.readOwn() : null;
    for (let micro = 0; micro < cfg.gradAccum; micro++) {
      const last = micro === cfg.gradAccum - 1;
      const reduce = stage > 1 || last;
      const tape = reduce ? new LoggingTape(gpu, this.paramGrads) : new Tape(gpu, this.paramGrads);
      if (own && units) {
        const gather = (k: number) => this.shards.gather(this.groups.params, own, k);
        await units.forward(gather, (beforeBlock) => this.batches.forward(tape, step, micro, beforeBlock));
      } else await this.batches.forward(tape, step, micro);
      if (reduce) {
        let hooks: BucketHooks = {};
        if (units) {
          units.startBackward();
          if (own) {
            for (const [k, resident] of units.resident.entries()) {
              if (resident) gpu.write(units.regionOf(k, 'value'), await this.shards.gather(this.groups.params, own, k));
            }
          }
          const open = async (k: number) => {
            if (units.needsOpen(k)) units.open(k, own ? await this.shards.gather(this.groups.params, own, k) : null);
          };
          hooks = {
            gradsOf: (b) => units.gradsOf(b),
            beforeNode: async (_node, ks) => {
              for (const k of ks) await open(k);
            },
            beforeLateLaunch: open,
          };
        }
        if (this.split) hooks.aliases = this.split.aliases();
        overlap = await backwardWithBuckets(
          gpu,
          model.params,
          this.buckets,
          tape as LoggingTape,
          RULES,
          async (b, host) => {
            const pc = this.pieces[b.index];
            const padded = new Float32Array(pc.c * this.comm.size);
            padded.set(host);
            // avg: the mean over ranks of per-rank mean-loss gradients is the global mean's gradient.
            const mine = await this.groups.grads.reduceScatter(padded, { op: 'avg' });
            const gHost = this.shards.gHost;
            if (micro === 0 || stage === 1) gHost.set(mine, pc.at);
            else for (let i = 0; i < pc.c; i++) gHost[pc.at + i] += mine[i];
          },
          hooks,
        );
      } else await tape.backwardAsync(RULES);
      tape.dispose();
    }
    const lr = lrAt(this.schedule, step);
    const gradNorm = await this.update(lr, step + 1);
    if (stage < 3) await this.allGatherUpdated();
    const loss = await this.batches.globalLoss(this.groups.scalars);
    return { step, lr, loss, gradNorm, sent: this.meter.take(), overlap };
  }

  /** Global norm from the shards, then AdamW on this rank's pieces. Returns ‖g‖₂ before clipping. */
  private async update(lr: number, t: number): Promise<number> {
    const sq = this.shards.squaredNorm(this.split?.counts);
    const total = (await this.groups.scalars.allReduce(new Float32Array([sq]), { op: 'sum' }))[0];
    const norm = Math.sqrt(total);
    this.opt.stepSharded(this.shards.slots(), lr, t, norm);
    return norm;
  }

  /** Stages 1–2: every rank's updated pieces to everyone. */
  private async allGatherUpdated(): Promise<void> {
    const own = await this.shards.readOwn();
    for (const b of this.buckets) {
      this.gpu.write(
        sliceOf(this.model.params.values, b.start, b.end),
        await this.shards.gather(this.groups.params, own, b.index),
      );
    }
  }

  /**
   * Mean validation loss (train/evaluate.ts meanLoss on `data`'s fixed batches) of the model
   * this rank's pieces belong to. Stage 3 gathers every layer for the pass over the `eval`
   * group (one all-gather per bucket, outside a step's accounting), so all ranks must call it;
   * stages 1–2 hold the whole model and only evaluate.
   */
  async evaluate(data: TextDataset, cfg: TrainConfig): Promise<number> {
    if (!this.units || !this.shards.values) return await meanLoss(this.gpu, this.model, data, cfg);
    const full = await this.shards.gatherAll(this.groups.eval, await this.shards.readOwn());
    return await this.units.withAll(full, () => meanLoss(this.gpu, this.model, data, cfg));
  }

  /** The full flat parameter buffer, gathered from every rank's pieces (all ranks must call it). */
  async parameters(): Promise<Float32Array> {
    if (this.stage < 3) return await this.gpu.read(this.model.params.values) as Float32Array;
    return await this.shards.gatherFlat(this.groups.params, await this.shards.readOwn());
  }

  /**
   * The last step's averaged gradient (flat, Ψ_flat elements, before clipping), gathered from
   * every rank's reduced pieces; all ranks must call it (one all-gather per bucket).
   */
  async gradients(): Promise<Float32Array> {
    return await this.shards.gatherFlat(this.groups.params, this.shards.gradPieces());
  }

  /** Model-state bytes this rank holds now, summed from the buffers (see the module doc for the formulas). */
  memory(): ZeroMemory {
    return this.shards.memory(this.units?.workingBytes() ?? { params: 0, grads: 0 });
  }

  /** What a checkpoint of this rank holds: the store's remaining flat buffers and this rank's pieces. */
  trainingState(): Record<string, Tensor> {
    const { values, m, v } = this.shards;
    const out = { ...this.model.params.trainingState(), 'zero.m': m, 'zero.v': v };
    return values ? { ...out, 'zero.values': values } : out;
  }

  /** Frees the model's buffers and this trainer's shards. */
  destroy(): void {
    this.model.params.destroy();
    this.shards.destroy();
    this.opt.dispose();
  }
}
