/**
 * ZeRO stages 1–3 (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion
 * Parameter Models", arXiv 1910.02054; picotron's and FSDP's flat-parameter sharding) on top of
 * data parallelism (data_parallel.ts: same rows per rank, same loss averaging).
 *
 * Sharding. Every bucket k of the flat buffers (whole parameters, buckets.ts) of n_k elements
 * is split into d pieces of c_k = ⌈n_k / (64·d)⌉·64 elements (256-byte aligned so a piece can be
 * bound); rank r owns elements [start_k + r·c_k, start_k + min((r+1)·c_k, n_k)) of every bucket,
 * as FSDP shards each flat parameter. Its optimizer state (AdamW m, v) and reduced gradient live
 * in shard buffers of Σ_k c_k elements; AdamW runs once per (piece ∩ parameter) so each
 * parameter keeps its own weight decay (matrices only, as the single-rank run).
 *
 * - Stage 1 (P_os): local gradients accumulate over micro-batches; the last backward
 *   reduce-scatters (avg) each bucket as soon as it is final; each rank updates its pieces and
 *   an all-gather per bucket returns the updated parameters to everyone.
 * - Stage 2 (P_os+g): as 1, but every micro-batch's backward reduce-scatters and the rank keeps
 *   only its pieces (accumulated on the host); the full local gradient is scratch, zeroed per
 *   micro-batch.
 * - Stage 3 (P_os+g+p): parameters outside a rank's pieces are zero between uses. Before each
 *   micro-batch's forward every bucket is all-gathered (one call per bucket; with bucketBytes
 *   'layer' one per layer) into the value buffer and cleared again after the forward's kernels;
 *   the same gathers run again before backward and the values are cleared after it. No
 *   all-gather after the update. Simplification: the model's forward is encoded in one
 *   synchronous call, so all of a pass's gathers complete before it is encoded instead of layer
 *   i+1's gather overlapping layer i's compute.
 * - Clipping: each rank sums the squares of its reduced pieces, an allReduce (sum) of that one
 *   number gives ‖g‖², and the clip scale min(1, clip/(‖g‖+1e-6)) is that of the single-rank run.
 *
 * Elements sent per step and rank (ring algorithms, C = Σ_k c_k): reduce-scatter
 * (d−1)·C per reduce-scatter pass, all-gather (d−1)·C per gather pass; stage 1 = 2(d−1)·C,
 * stage 2 = (A+1)(d−1)·C, stage 3 = 3A(d−1)·C for A micro-batches, plus 1 element for the
 * loss and 1 for the norm to each ring neighbour step — ≈ 2(d−1)/d·Ψ and 3(d−1)/d·Ψ (DESIGN.md §7).
 *
 * Memory. The ParamStore still allocates full value, gradient and moment buffers on every
 * rank (it has no sharded mode); {@link ZeroTrainer.memory} reports what each stage must keep.
 */
import type { Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { Tape } from '../autograd/tape.ts';
import { RULES } from '../autograd/rules.ts';
import { adamwUpdate, packAdamHyper } from '../kernels/adamw.ts';
import type { Communicator } from '../dist/communicator.ts';
import type { LanguageModel } from '../models/model.ts';
import type { TextDataset } from '../data/dataset.ts';
import type { TrainConfig } from '../train/config.ts';
import { lrAt, type ScheduleSpec, scheduleFromConfig, validateSchedule } from '../train/schedules.ts';
import { backwardWithBuckets, type Bucket, LoggingTape, type OverlapStats, planBuckets, sliceOf } from './buckets.ts';
import { type DataParallelOptions, LocalBatches, type ParallelStepRecord, subGroup } from './data_parallel.ts';
import { TrafficMeter } from './traffic.ts';
import { clipScale } from '../train/optimizer.ts';

export type ZeroStage = 1 | 2 | 3;

export interface ZeroOptions extends DataParallelOptions {
  stage: ZeroStage;
}

/** Rank r's piece of bucket k: flat elements [lo, hi), at shard offset `at`, c elements reserved. */
export interface Piece {
  bucket: Bucket;
  c: number;
  at: number;
  lo: number;
  hi: number;
}

/** Model-state bytes per rank (fp32: 4 per value, 4 per gradient, 8 of AdamW state), as ZeRO §3 counts them. */
export interface ZeroMemory {
  params: number;
  grads: number;
  optimizer: number;
}

export class ZeroTrainer {
  readonly buckets: Bucket[];
  readonly pieces: Piece[];
  readonly schedule: ScheduleSpec;
  readonly stage: ZeroStage;
  /** Shard length Σ c_k. */
  readonly shard: number;
  private readonly batches: LocalBatches;
  private readonly g: Tensor;
  private readonly m: Tensor;
  private readonly v: Tensor;
  private readonly hyper: Tensor;
  private readonly norm: Tensor;
  private readonly gHost: Float32Array;
  private readonly updates: { value: Tensor; grad: Tensor; m: Tensor; v: Tensor; decay: boolean }[] = [];
  private readonly groups: Record<'grads' | 'params' | 'scalars', Communicator>;
  private readonly meter: TrafficMeter;
  private readonly paramGrads: Map<Tensor, Tensor>;

  /**
   * Every rank of `comm` builds the same model (same seed) first; stage 3 then drops (zeroes)
   * the values outside this rank's pieces.
   * @throws Error for a stage other than 1, 2, 3, and the errors of DataParallelTrainer's constructor.
   */
  constructor(readonly gpu: Gpu, readonly model: LanguageModel, data: TextDataset, readonly cfg: TrainConfig, readonly comm: Communicator, opts: ZeroOptions) {
    if (![1, 2, 3].includes(opts.stage)) throw new Error(`ZeRO: stage must be 1, 2 or 3, got ${opts.stage}`);
    this.stage = opts.stage;
    this.schedule = scheduleFromConfig(cfg);
    validateSchedule(this.schedule, cfg.steps);
    this.batches = new LocalBatches(gpu, model, data, cfg, comm.rank, comm.size);
    this.buckets = planBuckets(model.params, opts.bucketBytes ?? (opts.stage === 3 ? 'layer' : 1 << 20));
    const d = comm.size, r = comm.rank;
    let at = 0;
    this.pieces = this.buckets.map((b) => {
      const n = b.end - b.start, c = Math.ceil(n / (64 * d)) * 64;
      const p = { bucket: b, c, at, lo: Math.min(b.start + r * c, b.end), hi: Math.min(b.start + (r + 1) * c, b.end) };
      at += c;
      return p;
    });
    this.shard = at;
    this.g = gpu.zeros([Math.max(at, 1)], 'f32', 'zero.grad');
    this.m = gpu.zeros([Math.max(at, 1)], 'f32', 'zero.m');
    this.v = gpu.zeros([Math.max(at, 1)], 'f32', 'zero.v');
    this.hyper = gpu.zeros([8], 'f32', 'zero.hyper');
    this.norm = gpu.zeros([2], 'f32', 'zero.norm');
    this.gHost = new Float32Array(at);
    for (const pc of this.pieces) {
      for (const p of pc.bucket.params) {
        const lo = Math.max(p.offset, pc.lo), hi = Math.min(p.offset + p.size, pc.hi);
        if (hi <= lo) continue;
        const s = pc.at + lo - pc.lo;
        const values = model.params.values;
        this.updates.push({ value: sliceOf(values, lo, hi, p.name), grad: sliceOf(this.g, s, s + hi - lo), m: sliceOf(this.m, s, s + hi - lo), v: sliceOf(this.v, s, s + hi - lo), decay: p.decay });
      }
    }
    this.groups = { grads: subGroup(comm, 'grads'), params: subGroup(comm, 'params'), scalars: subGroup(comm, 'scalars') };
    this.meter = TrafficMeter.of(comm);
    this.paramGrads = model.params.gradMap();
    if (this.stage === 3) this.release();
  }

  /**
   * Optimizer step `step` (0-based) on this rank; see the module doc for what each stage sends.
   * Resolves to the global mean loss, the global grad norm and this rank's traffic.
   * @throws (rejects with) a collective's error.
   */
  async step(step: number): Promise<ParallelStepRecord> {
    const { gpu, model, cfg, stage } = this;
    this.meter.take();
    this.batches.startStep();
    model.params.zeroGrad();
    let overlap: OverlapStats = { launchedDuringBackward: 0, order: [] };
    const own = stage === 3 ? await this.readOwn() : null;
    for (let micro = 0; micro < cfg.gradAccum; micro++) {
      const last = micro === cfg.gradAccum - 1;
      const reduce = stage > 1 || last;
      if (stage > 1 && micro > 0) model.params.zeroGrad();
      if (own) await this.gather(own);
      const tape = reduce ? new LoggingTape(gpu, this.paramGrads) : new Tape(gpu, this.paramGrads);
      this.batches.forward(tape, step, micro);
      if (own) {
        // Queue order makes this safe: the forward's kernels read the gathered values before the
        // clear runs, and the re-gather's writes land after it, ready for backward. The re-gather's
        // messages overlap the GPU running the forward.
        this.release();
        await this.gather(own);
      }
      if (reduce) {
        overlap = await backwardWithBuckets(gpu, model.params, this.buckets, tape as LoggingTape, RULES, async (b, host) => {
          const pc = this.pieces[b.index];
          const padded = new Float32Array(pc.c * this.comm.size);
          padded.set(host);
          // avg: the mean over ranks of per-rank mean-loss gradients is the global mean's gradient.
          const mine = await this.groups.grads.reduceScatter(padded, { op: 'avg' });
          if (micro === 0 || stage === 1) this.gHost.set(mine, pc.at);
          else for (let i = 0; i < pc.c; i++) this.gHost[pc.at + i] += mine[i];
        });
      } else tape.backward(RULES);
      tape.dispose();
      if (own) this.release();
    }
    const lr = lrAt(this.schedule, step);
    const gradNorm = await this.update(lr, step + 1);
    if (stage < 3) await this.allGatherUpdated();
    const loss = await this.batches.globalLoss(this.groups.scalars);
    return { step, lr, loss, gradNorm, sent: this.meter.take(), overlap };
  }

  /** Global norm from the shards, then AdamW on this rank's pieces. Returns ‖g‖₂ before clipping. */
  private async update(lr: number, t: number): Promise<number> {
    const { gpu, cfg } = this;
    let sq = 0;
    for (const x of this.gHost) sq += x * x;
    const total = (await this.groups.scalars.allReduce(new Float32Array([sq]), { op: 'sum' }))[0];
    const norm = Math.sqrt(total);
    const scale = clipScale(norm, cfg.gradClip);
    gpu.write(this.norm, new Float32Array([norm, scale]));
    gpu.write(this.hyper, packAdamHyper({ lr, beta1: cfg.beta1, beta2: cfg.beta2, eps: cfg.eps, step: t }));
    if (this.shard) gpu.write(this.g, this.gHost);
    for (const u of this.updates) adamwUpdate(gpu, u.value, u.grad, u.m, u.v, this.hyper, this.norm, u.decay ? cfg.weightDecay : 0);
    return norm;
  }

  /** Host copies of this rank's pieces of the values, each padded to c_k. */
  private async readOwn(): Promise<Float32Array[]> {
    const all = await this.gpu.read(this.model.params.values) as Float32Array;
    return this.pieces.map((pc) => {
      const out = new Float32Array(pc.c);
      out.set(all.subarray(pc.lo, pc.hi));
      return out;
    });
  }

  /** All-gathers every bucket (one call each) from the pieces `own` and writes them into the values. */
  private async gather(own: Float32Array[]): Promise<void> {
    for (const pc of this.pieces) {
      const b = pc.bucket;
      const full = await this.groups.params.allGather(own[pc.bucket.index]);
      this.gpu.write(sliceOf(this.model.params.values, b.start, b.end), full.subarray(0, b.end - b.start));
    }
  }

  /** Stages 1–2: every rank's updated pieces to everyone. */
  private async allGatherUpdated(): Promise<void> {
    await this.gather(await this.readOwn());
  }

  /** Stage 3: encodes zeroing of the values outside this rank's pieces (freed after use). */
  private release(): void {
    const values = this.model.params.values;
    for (const pc of this.pieces) {
      const b = pc.bucket;
      const [lo, hi] = pc.hi > pc.lo ? [pc.lo, pc.hi] : [b.end, b.end];
      if (lo > b.start) this.gpu.clear(sliceOf(values, b.start, lo));
      if (b.end > hi) this.gpu.clear(sliceOf(values, hi, b.end));
    }
  }

  /** The full flat parameter buffer, gathered from every rank's pieces (all ranks must call it). */
  async parameters(): Promise<Float32Array> {
    if (this.stage < 3) return await this.gpu.read(this.model.params.values) as Float32Array;
    const own = await this.readOwn();
    const out = new Float32Array(this.model.params.values.size);
    for (const pc of this.pieces) {
      const full = await this.groups.params.allGather(own[pc.bucket.index]);
      out.set(full.subarray(0, pc.bucket.end - pc.bucket.start), pc.bucket.start);
    }
    return out;
  }

  /**
   * The last step's averaged gradient (flat, Ψ_flat elements, before clipping), gathered from
   * every rank's reduced pieces; all ranks must call it (one all-gather per bucket).
   */
  async gradients(): Promise<Float32Array> {
    const out = new Float32Array(this.model.params.grads.size);
    for (const pc of this.pieces) {
      const full = await this.groups.params.allGather(this.gHost.subarray(pc.at, pc.at + pc.c));
      out.set(full.subarray(0, pc.bucket.end - pc.bucket.start), pc.bucket.start);
    }
    return out;
  }

  /** Model-state bytes per rank under this stage, the ZeRO paper's accounting (Ψ = flat elements, C = shard elements), Ψ = flat elements, C = shard elements. */
  memory(): ZeroMemory {
    const psi = this.model.params.values.size * 4, c = this.shard * 4;
    return { params: this.stage === 3 ? c : psi, grads: this.stage >= 2 ? c : psi, optimizer: 2 * c };
  }
}
