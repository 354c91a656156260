/**
 * ZeRO stages 1–3 (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion
 * Parameter Models", arXiv 1910.02054; FSDP's flat-parameter units) as a gradient-sync mode of
 * the mesh trainer (grad_sync.ts, docs/design.md §16): the optimizer state (stage 1), the reduced
 * gradient (stage 2) and the values (stage 3) of one rank's (pp, tp) shard are split over the
 * dp·cp ranks that hold the same shard (Megatron's data-parallel group with cp), as DeepSpeed's
 * ZeRO runs over Megatron's model-parallel units.
 *
 * Layout (zero_pieces.ts): every bucket k of the ParamStore's flat buffers is cut into d pieces of
 * c_k elements; this rank owns piece r of every bucket, and its AdamW m, v (from stage 2 its
 * reduced gradient, at stage 3 its values) live in shard buffers of C = Σ_k c_k elements.
 * Buckets: 'layer' units at stages 2–3 (zero_units.ts keeps gradients and values one layer at a
 * time); at stage 1 DDP-sized buckets (1 MiB by default) when the reduce-scatters run inside
 * the last backward, else one bucket of the whole flat buffer.
 *
 * - Stage 1 (P_os): gradients accumulate in full over the micro-batches. For a whole replica the
 *   last micro-batch's backward reduce-scatters (avg) each bucket as soon as it is final
 *   (buckets.ts, overlapping the rest of backward); for a split model the sync reduce-scatters
 *   once after the schedule, after the tp / embedding / shared-block sums. The reduced pieces
 *   go back into the rank's own ranges of the flat gradient; AdamW updates the pieces and an
 *   all-gather per bucket returns the updated values to everyone.
 * - Stage 2 (P_os+g): every micro-batch's backward reduce-scatters each 'layer' unit and the rank
 *   keeps only its pieces (summed on the host over micro-batches); no full gradient buffer.
 * - Stage 3 (P_os+g+p): the values live as pieces only. Each micro-batch's forward all-gathers the
 *   resident units first and each block's unit when the forward reaches that block (the pipeline
 *   executor's forward hook and ModelStages.blocks' beforeBlock); the backward gathers them again
 *   just before the first rule that reads them (Tape.backwardAsync's beforeNode). No all-gather
 *   after the update.
 *
 * With pp each stage shards its own store; the tied embedding's copies on the first and last
 * stage are 'layer' units of equal length, so after the schedule the sync sums the rank's reduced
 * piece of it over the embedding group ({@link ZeroSync.sumPieces}).
 *
 * Elements sent per step and rank (ring, C = Σ c_k, m micro-batches): reduce-scatter (d−1)·C per
 * pass (stage 1 one pass, stages 2–3 one per micro-batch), all-gather (d−1)·C per pass (stages 1–2
 * one, stage 3 two per micro-batch) — docs/design.md §17.
 */
import type { Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { RULES } from '../autograd/rules.ts';
import type { Communicator } from '../comm/communicator.ts';
import type { TextDataset } from '../data/dataset.ts';
import type { TrainConfig } from '../train/config.ts';
import type { AdamWSlot } from '../train/optimizer.ts';
import { meanLoss } from '../train/evaluate.ts';
import {
  backwardWithBuckets,
  type Bucket,
  type LoggingTape,
  type OverlapStats,
  planBuckets,
  sliceOf,
} from './buckets.ts';
import { subGroup } from './data_parallel.ts';
import { sequenceParallelElements, sumSequenceParallelSlices } from './sequence_parallel.ts';
import { CompressedComm } from '../comm/compressed.ts';
import type { Scheme } from '../comm/compression.ts';
import { bucketedHooks, type ExecutorHooks } from './pipeline_executor.ts';
import type { ModelStages } from './stages.ts';
import { LayerUnits } from './zero_units.ts';
import { type ZeroMemory, ZeroShards } from './zero_pieces.ts';

export type ZeroStage = 1 | 2 | 3;

/** One rank's ZeRO state and collectives over its dp·cp group (see the module doc). */
export class ZeroSync {
  readonly buckets: Bucket[];
  /** This rank's pieces: AdamW m, v; from stage 2 the reduced gradient, at stage 3 the values. */
  readonly shards: ZeroShards;
  /** Stages 2–3: the per-layer working buffers. */
  readonly units: LayerUnits | null;
  /** Whether the reduce-scatters run inside backward (stages 2–3, and stage 1 of a whole replica), not after the schedule. */
  readonly inBackward: boolean;
  /** The last step's bucket launches of its last reducing backward. */
  overlap: OverlapStats = { launchedDuringBackward: 0, order: [] };
  /** Stage 3: this step's host copies of the rank's value pieces (what the all-gathers send). */
  private own: Float32Array[] | null = null;
  private readonly params: Communicator;
  private readonly evalGroup: Communicator;
  /** The dp compression of the gradient reduce-scatters (docs/design.md §28), or null; the gathers stay exact. */
  private readonly compressed: CompressedComm | null;

  /**
   * Shards `stages.params` over `group` and frees what the stage shards away: the flat AdamW
   * moments always, the flat gradients from stage 2, the flat values at stage 3.
   * @param grads the `grads` sub-group of `group` (the reduce-scatters); `replica` whether the
   *   rank holds the whole model (then stage 1 reduce-scatters inside the last backward, else
   *   after the schedule and the sums that precede it).
   * @throws Error for stages 2–3 with byte-sized buckets (they need 'layer' units).
   */
  constructor(
    readonly gpu: Gpu,
    readonly stages: ModelStages,
    readonly stage: ZeroStage,
    group: Communicator,
    private readonly grads: Communicator,
    replica: boolean,
    bucketBytes?: number | 'layer',
    compress?: Scheme,
    private readonly spGrads: Communicator | null = null,
  ) {
    this.inBackward = stage > 1 || replica;
    if (stage > 1 && bucketBytes !== undefined && bucketBytes !== 'layer') {
      throw new Error(
        `ZeRO-${stage}: buckets must be 'layer' (got ${bucketBytes} bytes); gradients and values are kept one layer at a time`,
      );
    }
    const store = stages.params;
    // Without overlap nothing is gained by cutting the flat buffer: one call of each collective.
    this.buckets = planBuckets(store, stage > 1 ? 'layer' : replica ? bucketBytes ?? 1 << 20 : Infinity);
    this.shards = new ZeroShards(gpu, store, this.buckets, group, { grads: stage > 1, values: stage === 3 });
    const why = `ZeRO-${stage} keeps AdamW's moments sharded (zero_sync.ts)`;
    store.rehome('m', null, [], why);
    store.rehome('v', null, [], why);
    this.units = stage > 1 ? new LayerUnits(gpu, store, this.buckets, stage === 3) : null;
    // The store's value and gradient tensors moved: the tapes need the new map (and tp's bias columns).
    if (this.units) stages.rebindGrads();
    this.params = subGroup(group, 'params');
    this.evalGroup = subGroup(group, 'eval');
    this.compressed = compress && compress.kind !== 'none' ? new CompressedComm(grads, gpu, compress) : null;
    for (const pc of this.shards.pieces) this.compressed?.prepareReduceScatter(`zero.${pc.bucket.index}`, pc.c);
  }

  /** The compressed reduce-scatters' error-feedback residuals (empty without them): checkpoint state. */
  compressionState(): Record<string, Tensor> {
    return this.compressed?.state() ?? {};
  }

  /** Whether micro-batch `micro`'s backward reduce-scatters (every one from stage 2, the last at stage 1 in backward). */
  reducesIn(micro: number, m: number): boolean {
    return this.stage > 1 || (this.inBackward && micro === m - 1);
  }

  /** Starts a step: the reduced pieces restart from zero, the gradients (stage 1) too; stage 3 reads its own pieces. */
  async startStep(): Promise<void> {
    this.shards.gHost.fill(0);
    if (!this.units) this.stages.params.zeroGrad(); // stages 2–3 zero each unit as its backward opens it
    this.own = this.stage === 3 ? await this.shards.readOwn() : null;
  }

  /** The executor hooks of a step of `m` micro-batches: logging tapes where backward reduces, stage 3's forward gathers. */
  hooks(m: number): ExecutorHooks {
    const hooks = bucketedHooks(this.gpu, this.stages, (micro) => this.reducesIn(micro, m), (t) => this.backward(t));
    const { units } = this;
    if (units && this.stage === 3) hooks.forward = (_micro, run) => units.forward((k) => this.gather(k), run);
    return hooks;
  }

  /** Bucket k's values gathered from every rank's piece (stage 3). */
  private gather(k: number): Promise<Float32Array> {
    return this.shards.gather(this.params, this.own!, k);
  }

  /**
   * One backward on `tape` with each bucket reduce-scattered (avg) as soon as it is final; at
   * stages 2–3 each unit is opened (stage 3: gathered) before the first rule that reads it.
   * @throws (rejects with) a peer's failure or timeout.
   */
  private async backward(tape: LoggingTape): Promise<void> {
    const { gpu, units } = this, hooks = { aliases: this.stages.ctx.biasAliases() };
    if (units) {
      units.startBackward();
      if (this.own) {
        for (const [k, resident] of units.resident.entries()) {
          if (resident) gpu.write(units.regionOf(k, 'value'), await this.gather(k));
        }
      }
      const open = async (k: number) => {
        if (units.needsOpen(k)) units.open(k, this.own ? await this.gather(k) : null);
      };
      Object.assign(hooks, {
        gradsOf: (b: Bucket) => units.gradsOf(b),
        beforeNode: async (_node: unknown, ks: number[]) => {
          for (const k of ks) await open(k);
        },
        beforeLateLaunch: open,
      });
    }
    const store = this.stages.params;
    this.overlap = await backwardWithBuckets(
      gpu,
      store,
      this.buckets,
      tape,
      RULES,
      (b, host) => this.reduce(b, host),
      hooks,
    );
  }

  /** Reduce-scatters (avg) bucket b's local gradient `host` and adds this rank's piece to the step's reduced pieces. */
  private async reduce(b: Bucket, host: Float32Array): Promise<void> {
    // Each tp rank reduces the same unit at the same point of its backward, so these allReduces line up.
    if (this.spGrads) await sumSequenceParallelSlices(b.params, b.start, host, this.spGrads);
    const pc = this.shards.pieces[b.index], padded = new Float32Array(pc.c * this.grads.size);
    padded.set(host);
    // avg: the mean over ranks of per-rank mean-loss gradients is the global mean's gradient.
    const mine = this.compressed
      ? await this.compressed.reduceScatter(padded, { op: 'avg', name: `zero.${b.index}` })
      : await this.grads.reduceScatter(padded, { op: 'avg' });
    const g = this.shards.gHost;
    for (let i = 0; i < pc.c; i++) g[pc.at + i] += mine[i];
  }

  /** Stage 1 after the schedule: every bucket of the synchronised local flat gradient `flat` (host, F elements) reduce-scattered. */
  async reduceAfter(flat: Float32Array): Promise<void> {
    for (const b of this.buckets) await this.reduce(b, flat.subarray(b.start, b.end));
  }

  /**
   * Sums this rank's reduced pieces of parameter `name`'s bucket over `group` (allReduce, c_k
   * elements): the tied embedding's copies on the first and last stage form buckets of the
   * same length, so the same rank of each dp·cp group holds the same elements of both.
   * @throws Error when `name`'s bucket holds other parameters too (it must be its own 'layer' unit).
   */
  async sumPieces(name: string, group: Communicator): Promise<void> {
    const pc = this.shards.pieces.find((p) => p.bucket.params.some((q) => q.name === name))!;
    if (pc.bucket.params.length > 1) {
      throw new Error(
        `ZeRO: '${name}' shares bucket ${pc.bucket.index} with other parameters; it cannot be summed alone`,
      );
    }
    const g = this.shards.gHost.subarray(pc.at, pc.at + pc.c);
    g.set(await group.allReduce(g.slice(), { op: 'sum' }));
  }

  /** Σ g² over this step's reduced pieces of the parameters `counts` selects. */
  squaredNorm(counts: (name: string) => boolean): number {
    return this.shards.squaredNorm(counts);
  }

  /** What this rank's AdamW updates: one slot per (piece ∩ parameter), the reduced pieces written where it reads them. */
  slots(): readonly AdamWSlot[] {
    return this.shards.slots();
  }

  /** Stages 1–2 after the update: every rank's updated pieces to everyone (one all-gather per bucket). */
  async allGather(): Promise<void> {
    const own = await this.shards.readOwn(), values = this.stages.params.values;
    for (const b of this.buckets) {
      this.gpu.write(sliceOf(values, b.start, b.end), await this.shards.gather(this.params, own, b.index));
    }
  }

  /** The flat values (F elements), gathered from every rank's pieces at stage 3 (all ranks must call it). */
  async values(): Promise<Float32Array> {
    if (this.stage < 3) return await this.gpu.read(this.stages.params.values) as Float32Array;
    return await this.shards.gatherFlat(this.params, await this.shards.readOwn());
  }

  /** The last step's reduced gradient (flat, before clipping), gathered from every rank's pieces (all ranks must call it). */
  gradients(): Promise<Float32Array> {
    return this.shards.gatherFlat(this.params, this.shards.gradPieces());
  }

  /**
   * Mean validation loss (train/evaluate.ts meanLoss) of the whole model this rank's pieces
   * belong to (a replica of dp·cp, stage 3): every layer gathered over the `eval` group, outside
   * a step's accounting, so every rank of the group must call it.
   */
  async evaluate(data: TextDataset, cfg: TrainConfig): Promise<number> {
    const model = this.stages.model;
    if (!this.units || !this.shards.values) return await meanLoss(this.gpu, model, data, cfg);
    const full = await this.shards.gatherAll(this.evalGroup, await this.shards.readOwn());
    return await this.units.withAll(full, () => meanLoss(this.gpu, model, data, cfg));
  }

  /** Model-state bytes this rank holds now, summed from its buffers. */
  memory(): ZeroMemory {
    return this.shards.memory(this.units?.workingBytes() ?? { params: 0, grads: 0 });
  }

  /** A checkpoint's tensors: the store's remaining flat buffers and this rank's pieces. */
  trainingState(): Record<string, Tensor> {
    const { values, m, v } = this.shards;
    const out = { ...this.stages.params.trainingState(), 'zero.m': m, 'zero.v': v };
    return values ? { ...out, 'zero.values': values } : out;
  }

  /** Elements of each reduce-scatter / all-gather call's buffer, d·c_k per bucket (for stepTraffic). */
  callSizes(): number[] {
    return this.shards.pieces.map((p) => p.c * this.grads.size);
  }

  /** Elements of each bucket's sequence-parallel partial gradients, which its reduce sums over tp first (0: none). */
  spCallSizes(): number[] {
    return this.buckets.map((b) => sequenceParallelElements(b.params));
  }

  /** Frees the shard buffers (the store frees the working buffers with itself). */
  destroy(): void {
    this.shards.destroy();
  }
}
