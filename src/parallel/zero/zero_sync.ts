/**
 * ZeRO stages 1–3 (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion
 * Parameter Models", arXiv 1910.02054; FSDP's flat-parameter units) as a gradient-sync mode of
 * the mesh trainer (grad_sync.ts, docs/design.md#zero): the optimizer state (stage 1), the reduced
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
 * piece of it over the embedding group (ZeroShards.sumPieces), and the hybrid's shared block,
 * whose units every stage holds alike, over the pp group. An interleaved rank reduces (and
 * gathers) each unit in the stage that finishes (first reads) it; under ep expert units shard
 * over their expert-data-parallel group (zero_groups.ts).
 *
 * Elements sent per step and rank (ring, C = Σ c_k, m micro-batches): reduce-scatter (d−1)·C per
 * pass (stage 1 one pass, stages 2–3 one per micro-batch), all-gather (d−1)·C per pass (stages 1–2
 * one, stage 3 two per micro-batch) — docs/design.md#communication-per-optimizer-step.
 */
import type { Gpu } from '../../gpu/context.ts';
import type { Tensor } from '../../gpu/tensor.ts';
import { RULES } from '../../autograd/rules.ts';
import type { Communicator } from '../../comm/communicator.ts';
import type { TextDataset } from '../../data/dataset.ts';
import type { TrainConfig } from '../../train/config.ts';
import type { AdamWSlot } from '../../train/optimizer.ts';
import { meanLoss } from '../../train/evaluate.ts';
import {
  backwardWithBuckets,
  type Bucket,
  type LoggingTape,
  type OverlapStats,
  planBuckets,
  sliceOf,
} from '../data/buckets.ts';
import { sequenceParallelElements, sumSequenceParallelSlices } from '../tensor/sequence_parallel.ts';
import type { Scheme } from '../../comm/compression.ts';
import { type ExpertGroup, type StageUnits, stageUnits, ZeroGroups } from './zero_groups.ts';
import { bucketedHooks, type ExecutorHooks } from '../pipeline/pipeline_executor.ts';
import type { ModelStages } from '../pipeline/stages.ts';
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
  /** Per local stage: the units its backward reduce-scatters and (stage 3) gathers (zero_groups.ts stageUnits). */
  private readonly perStage: Map<number, StageUnits>;
  /** Stage 3: this step's host copies of the rank's value pieces (what the all-gathers send). */
  private own: Float32Array[] | null = null;
  /** The dp·cp group of the dense buckets, and (ep) the expert-data-parallel group of the expert buckets. */
  private readonly groups: ZeroGroups;

  /**
   * Shards `stages.params` over `group` and frees what the stage shards away: the flat AdamW
   * moments always, the flat gradients from stage 2, the flat values at stage 3.
   * @param grads the `grads` sub-group of `group` (the reduce-scatters); `replica` whether the
   *   rank holds the whole model (then stage 1 reduce-scatters inside the last backward, else
   *   after the schedule and the sums that precede it); `compress` the dp compression of the
   *   reduce-scatters (docs/design.md#compressed-collectives-and-the-per-dimension-policy; the gathers stay exact);
   *   `experts` under ep (zero_groups.ts ExpertGroup).
   * @throws Error for stages 2–3 with byte-sized buckets (they need 'layer' units).
   */
  constructor(
    readonly gpu: Gpu,
    readonly stages: ModelStages,
    readonly stage: ZeroStage,
    group: Communicator,
    grads: Communicator,
    replica: boolean,
    bucketBytes?: number | 'layer',
    compress?: Scheme,
    private readonly spGrads: Communicator | null = null,
    experts?: ExpertGroup,
  ) {
    this.inBackward = stage > 1 || replica;
    if (stage > 1 && bucketBytes !== undefined && bucketBytes !== 'layer') {
      throw new Error(
        `ZeRO-${stage}: buckets must be 'layer' (got ${bucketBytes} bytes); gradients and values are kept one layer at a time`,
      );
    }
    const store = stages.params;
    // Without overlap nothing is gained by cutting the flat buffer: one call of each collective.
    const buckets = planBuckets(store, stage > 1 ? 'layer' : replica ? bucketBytes ?? 1 << 20 : Infinity);
    this.groups = new ZeroGroups(gpu, group, grads, compress, experts);
    this.buckets = this.groups.split(buckets);
    const sharded = { grads: stage > 1, values: stage === 3 };
    this.shards = new ZeroShards(gpu, store, this.buckets, (b) => this.groups.of(b), sharded);
    const why = `ZeRO-${stage} keeps AdamW's moments sharded (zero_sync.ts)`;
    store.rehome('m', null, [], why);
    store.rehome('v', null, [], why);
    this.units = stage > 1 ? new LayerUnits(gpu, store, this.buckets, stage === 3) : null;
    // The store's value and gradient tensors moved: the tapes need the new map (and tp's bias columns).
    if (this.units) stages.rebindGrads();
    this.perStage = stageUnits(this.buckets, stages.stages, (n) => stages.stagesUsing(n));
    for (const pc of this.shards.pieces) this.groups.of(pc.bucket).prepare(`zero.${pc.bucket.index}`, pc.c);
  }

  /** The all-gather group of bucket k's values (`eval`: evaluation's, outside the accounting). */
  private gatherGroup(k: number, purpose: 'params' | 'eval' = 'params'): Communicator | null {
    return this.groups.of(this.buckets[k])[purpose];
  }

  /** The compressed reduce-scatters' error-feedback residuals (empty without them): checkpoint state. */
  compressionState(): Record<string, Tensor> {
    return this.groups.state();
  }

  /** Whether micro-batch `micro`'s backward reduce-scatters (every one from stage 2, the last at stage 1 in backward). */
  reducesIn(micro: number, m: number): boolean {
    return this.stage > 1 || (this.inBackward && micro === m - 1);
  }

  /** Starts a step: the reduced pieces restart from zero, the gradients too; stage 3 reads its own pieces. */
  async startStep(): Promise<void> {
    this.shards.gHost.fill(0);
    // Stages 2–3: the resident units' gradients (a rotating unit's are zeroed as a backward opens it).
    if (this.units) this.units.zeroResident();
    else this.stages.params.zeroGrad();
    this.own = this.stage === 3 ? await this.shards.readOwn() : null;
  }

  /** The executor hooks of a step of `m` micro-batches: logging tapes where backward reduces, stage 3's forward gathers. */
  hooks(m: number): ExecutorHooks {
    const hooks = bucketedHooks(this.gpu, this.stages, (j) => this.reducesIn(j, m), (...a) => this.backward(...a));
    const { units } = this;
    if (units && this.stage === 3) {
      hooks.forward = (_micro, s, run) => units.forward((k) => this.gather(k), this.perStage.get(s)!.forward, run);
    }
    return hooks;
  }

  /** Bucket k's values gathered from every rank's piece (stage 3). */
  private gather(k: number): Promise<Float32Array> {
    return this.shards.gather(this.gatherGroup(k), this.own!, k);
  }

  /**
   * Stage `stage`'s backward on `tape` with each of the units it finishes (all of them but on an
   * interleaved rank) reduce-scattered (avg) as soon as it is final; at stages 2–3 each unit is
   * opened (stage 3: gathered) before the first rule that reads it. `weightsOnly`: this is a zb-h1 W
   * after its B, which wrote no gradient: W opens the units (stage 3 is refused, rule zb-h1-zero3).
   * @throws (rejects with) a peer's failure or timeout.
   */
  private async backward(tape: LoggingTape, stage: number, weightsOnly: boolean): Promise<void> {
    const { gpu, units } = this, mine = this.perStage.get(stage)!;
    const hooks = { aliases: this.stages.ctx.biasAliases(), weightsOnly };
    // Stage 1 reduces a whole replica (one stage) in its last backward: every bucket.
    const buckets = units ? mine.reduce : this.buckets;
    if (units) {
      units.startBackward();
      if (this.own) {
        for (const [k, resident] of units.resident.entries()) {
          if (resident && mine.backward.has(k)) gpu.write(units.regionOf(k, 'value'), await this.gather(k));
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
    this.overlap = await backwardWithBuckets(gpu, store, buckets, tape, RULES, async (b, host) => {
      // Read back: a resident unit starts collecting the next micro-batch's gradients from zero.
      if (units?.resident[b.index]) gpu.clear(units.regionOf(b.index, 'grad'));
      await this.reduce(b, host);
    }, hooks);
  }

  /** Reduce-scatters (avg) bucket b's local gradient `host` and adds this rank's piece to the step's reduced pieces. */
  private async reduce(b: Bucket, host: Float32Array): Promise<void> {
    // Each tp rank reduces the same unit at the same point of its backward, so these allReduces line up.
    if (this.spGrads) await sumSequenceParallelSlices(b.params, b.start, host, this.spGrads);
    const pc = this.shards.pieces[b.index], group = this.groups.of(b), padded = new Float32Array(pc.c * group.size);
    padded.set(host);
    // avg: the mean over ranks of per-rank mean-loss gradients is the global mean's gradient
    // (an expert's: the sum over its replicas divided by dp, zero_groups.ts).
    const mine = await group.reduceScatter(padded, `zero.${b.index}`);
    const g = this.shards.gHost;
    for (let i = 0; i < pc.c; i++) g[pc.at + i] += mine[i];
  }

  /** Stage 1 after the schedule: every bucket of the synchronised local flat gradient `flat` (host, F elements) reduce-scattered. */
  async reduceAfter(flat: Float32Array): Promise<void> {
    for (const b of this.buckets) await this.reduce(b, flat.subarray(b.start, b.end));
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
      this.gpu.write(
        sliceOf(values, b.start, b.end),
        await this.shards.gather(this.gatherGroup(b.index), own, b.index),
      );
    }
  }

  /** The flat values (F elements), gathered from every rank's pieces at stage 3 (all ranks must call it). */
  async values(): Promise<Float32Array> {
    if (this.stage < 3) return await this.gpu.read(this.stages.params.values) as Float32Array;
    return await this.shards.gatherFlat((k) => this.gatherGroup(k), await this.shards.readOwn());
  }

  /** The last step's reduced gradient (flat, before clipping), gathered from every rank's pieces (all ranks must call it). */
  gradients(): Promise<Float32Array> {
    return this.shards.gatherFlat((k) => this.gatherGroup(k), this.shards.gradPieces());
  }

  /**
   * Mean validation loss (train/evaluate.ts meanLoss) of the whole model this rank's pieces
   * belong to (a replica of dp·cp, stage 3): every layer gathered over the `eval` group, outside
   * a step's accounting, so every rank of the group must call it.
   */
  async evaluate(data: TextDataset, cfg: TrainConfig): Promise<number> {
    const model = this.stages.model;
    if (!this.units || !this.shards.values) return await meanLoss(this.gpu, model, data, cfg);
    const full = await this.shards.gatherAll((k) => this.gatherGroup(k, 'eval'), await this.shards.readOwn());
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

  /** Each reduce-scatter / all-gather call's elements, d·c_k per bucket of dense (or `experts`) parameters (stepTraffic). */
  callSizes(experts = false): number[] {
    const mine = this.shards.pieces.filter((p) => this.groups.isExpert(p.bucket) === experts);
    return mine.map((p) => p.c * this.groups.of(p.bucket).size);
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
