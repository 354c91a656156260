/**
 * The gradient-sync hook of the mesh trainer (mesh_trainer.ts; docs/design.md#parallel-strategies), run after the
 * micro-batch schedule has left this rank's local gradients in its ParamStore, and the update
 * of what the rank owns. Kept apart from the step so the step reads as schedule → sync → norm →
 * update, the order picotron's train_step follows:
 * - sequence parallelism: the partial gradients of replicated parameters summed over tp;
 * - a tied embedding held by the first and last pipeline stage: both copies' gradients summed
 *   over the embedding group (Megatron's `_allreduce_word_embedding_grads`); a block several
 *   stages run (the hybrid's shared attention), held by every stage: summed over the pp group;
 * - data (and context) parallelism: one allReduce (avg) of the rank's packed gradient over the
 *   dp·cp ranks holding the same shard; for a whole replica, DDP's buckets allReduced during the
 *   last backward instead; under ZeRO-1/2/3, zero_sync.ts's reduce-scatters (after the schedule,
 *   or inside the backward), piece update and all-gathers;
 * - this rank's share of ‖g‖², each parameter counted once in the world sum.
 * The hooks it hands the pipeline executor ({@link GradSync.hooks}) are where the buckets and
 * ZeRO enter the micro-batch schedule.
 */
import type { Gpu } from '../../gpu/context.ts';
import type { Tensor } from '../../gpu/tensor.ts';
import type { AdamWSlot } from '../../train/optimizer.ts';
import type { Communicator } from '../../comm/communicator.ts';
import type { MeshCoords } from '../../comm/mesh.ts';
import { allReduceSequenceParallelGrads } from '../tensor/sequence_parallel.ts';
import { subGroup } from './data_parallel.ts';
import { type ZeroStage, ZeroSync } from '../zero/zero_sync.ts';
import type { ModelStages } from '../pipeline/stages.ts';
import { bucketedHooks, type ExecutorHooks } from '../pipeline/pipeline_executor.ts';
import { countedOnTpRank } from '../tensor/tp_table.ts';
import { packParams, type Param, unpackParams } from '../../nn/params.ts';
import { RULES } from '../../autograd/rules.ts';
import {
  backwardWithBuckets,
  type Bucket,
  type LoggingTape,
  type OverlapStats,
  planBuckets,
  sliceOf,
} from './buckets.ts';
import { expertOf } from '../../models/moe_specs.ts';
import type { CompressPolicy } from '../../comm/compression.ts';
import { type GradReduce, gradReduce } from './grad_compression.ts';

/** The groups one rank synchronises over (world ranks), from the mesh trainer. */
export interface SyncGroups {
  /** The pipeline ranks of this rank's (dp, cp, tp) coordinate. */
  pp: number[];
  /** The data-parallel ranks of this rank's (pp, cp, tp) coordinate, in dp order. */
  dp: number[];
  /** The dp·cp ranks holding the same shard, dp-major (Megatron's data-parallel group with cp). */
  dpcp: number[];
  /** First and last pipeline rank of this rank's (dp, cp, tp) coordinate when it is one of them, else []. */
  embedding: number[];
}

/** Gradient synchronisation and update of one mesh rank (see the module doc). */
export class GradSync {
  /** ZeRO-1/2/3 over the dp·cp group, experts over their edp group (plan.zero > 0), else null. */
  readonly zero: ZeroSync | null;
  private readonly dpGrads: Communicator;
  /** The dp·cp ranks holding this rank's shard (the low-communication outer loop's group, outer_sync.ts). */
  readonly dpGroup: Communicator;
  /** Low-communication training (plan.sync): no per-step dp average; each worker's norm is its own. */
  private readonly local: boolean;
  private readonly spGrads: Communicator | null;
  private readonly embGroup: Communicator | null;
  private readonly sharedGroup: Communicator | null;
  /** With ep > 1: the parameters averaged over dp·cp, and this rank's experts (the rest). */
  private readonly dense: readonly Param[];
  private readonly experts: readonly Param[];
  /** The dp ranks holding this rank's experts (`edp[…]`, DeepSpeed-MoE's expert-data-parallel group), when more than one. */
  private readonly expertGrads: Communicator | null;
  private readonly ep: number;
  private readonly dp: number;
  /** The dp·cp average of the dense gradient and the edp sum of the experts' (under the plan's dp compression). */
  private readonly denseAverage: GradReduce;
  private readonly expertSum: GradReduce | null;
  /** Data parallelism of a whole replica: the gradient buckets allReduced during the last backward, else null. */
  readonly buckets: Bucket[] | null;
  /** The last step's bucket launches ({@link bucketedBackward}); empty without buckets. */
  private ddpOverlap: OverlapStats = { launchedDuringBackward: 0, order: [] };
  private reduced = false;

  /**
   * @param tp this rank's tensor-parallel group; `zero` the ZeRO stage; `sp` sequence parallelism.
   * @throws Error from ZeroSync (ZeRO-2/3 with byte-sized buckets).
   */
  constructor(
    readonly gpu: Gpu,
    readonly stages: ModelStages,
    readonly coords: MeshCoords,
    world: Communicator,
    tp: Communicator,
    groups: SyncGroups,
    o: {
      zero: number;
      sp: boolean;
      cp: number;
      ep?: number;
      bucketBytes?: number | 'layer';
      compress?: CompressPolicy;
      local?: boolean;
    },
  ) {
    const sync = this.dpGroup = world.newGroup(groups.dpcp, `${o.cp > 1 ? 'dpcp' : 'dp'}[${groups.dpcp.join(',')}]`);
    this.local = o.local ?? false;
    this.dpGrads = subGroup(sync, 'grads');
    // A whole-model replica (data parallelism only): its reduction can overlap the last backward.
    const replica = stages.ctx.tp === 1 && groups.pp.length === 1 && o.cp === 1 && (o.ep ?? 1) === 1;
    this.spGrads = o.sp ? subGroup(tp, 'sp-grads') : null;
    // ZeRO-2/3 reduce inside backward, so they sum the sp partials bucket by bucket there.
    const spInBackward = o.zero >= 2 ? this.spGrads : null;
    this.ep = o.ep ?? 1;
    this.dp = groups.dp.length;
    const moe = this.ep > 1, edp = groups.dp.filter((_, d) => d % this.ep === this.coords.dp % this.ep);
    const edpGroup = moe && edp.length > 1 ? world.newGroup(edp, `edp[${edp.join(',')}]`) : null;
    // ZeRO shards an expert over the ranks holding it (zero_groups.ts); its sum over them / dp.
    const isExpert = (n: string) => !!expertOf(n), dp = this.dp;
    const experts = moe ? { group: edpGroup, grads: edpGroup && subGroup(edpGroup, 'grads'), isExpert, dp } : undefined;
    this.zero = o.zero > 0
      ? new ZeroSync(
        gpu,
        stages,
        o.zero as ZeroStage,
        sync,
        this.dpGrads,
        replica,
        o.bucketBytes,
        o.compress?.dp,
        spInBackward,
        experts,
      )
      : null;
    const emb = groups.embedding;
    this.embGroup = emb.length ? world.newGroup(emb, `embedding[${emb.join(',')}]`) : null;
    const pp = groups.pp;
    this.sharedGroup = pp.length > 1 && stages.shared.length ? world.newGroup(pp, `shared[${pp.join(',')}]`) : null;
    const ps = stages.params.params;
    this.dense = moe ? ps.filter((p) => !expertOf(p.name)) : ps;
    this.experts = moe ? ps.filter((p) => expertOf(p.name)) : [];
    // DDP's buckets, reduced while backward runs; compressed, the dp gradient is reduced whole after the schedule.
    const ddp = replica && !o.zero && !this.local && groups.dpcp.length > 1 &&
      (o.compress?.dp.kind ?? 'none') === 'none';
    this.buckets = ddp ? planBuckets(stages.params, o.bucketBytes ?? 1 << 20) : null;
    this.expertGrads = edpGroup && !this.zero ? subGroup(edpGroup, 'experts') : null;
    // Under ZeRO the reduce-scatters carry the dp compression (zero_sync.ts); the plain average is never called.
    this.denseAverage = gradReduce(
      gpu,
      this.dpGrads,
      this.dense,
      this.zero ? undefined : o.compress?.dp,
      'avg',
      'grads',
    );
    this.expertSum = this.expertGrads
      ? gradReduce(gpu, this.expertGrads, this.experts, o.compress?.dp, 'sum', 'experts')
      : null;
  }

  /**
   * Synchronises the local gradients (see the module doc) and returns this rank's share of the
   * global ‖g‖², before clipping.
   * @throws (rejects with) a peer's failure or timeout.
   */
  async run(): Promise<number> {
    const { gpu, stages, zero } = this;
    if (zero?.inBackward) {
      // Every bucket was reduce-scattered inside backward (ZeRO-2/3; an overlapped ZeRO-1): the tied
      // embedding's copies hold equal pieces, summed over the embedding group, the shared block's over pp.
      if (this.embGroup) await zero.shards.sumPieces([stages.tied!], this.embGroup);
      if (this.sharedGroup) await zero.shards.sumPieces(stages.shared, this.sharedGroup);
      return zero.squaredNorm((n) => this.counts(n));
    }
    if (this.spGrads) await allReduceSequenceParallelGrads(gpu, stages.params, this.spGrads);
    const flat = (await gpu.read(stages.params.grads) as Float32Array).slice();
    if (this.embGroup) {
      // The tied embedding's two copies get the sum of the embedding's and the head's gradients.
      const w = stages.params.get(stages.tied!), g = flat.slice(w.offset, w.offset + w.size);
      await this.embGroup.allReduce(g, { op: 'sum' });
      flat.set(g, w.offset);
    }
    if (this.sharedGroup) {
      // Each stage's copy of a shared block gets the sum of every stage's uses.
      const ps = stages.shared.map((n) => stages.params.get(n)),
        g = new Float32Array(ps.reduce((a, p) => a + p.size, 0));
      ps.reduce((off, p) => (g.set(flat.subarray(p.offset, p.offset + p.size), off), off + p.size), 0);
      await this.sharedGroup.allReduce(g, { op: 'sum' });
      ps.reduce((off, p) => (flat.set(g.subarray(off, off + p.size), p.offset), off + p.size), 0);
    }
    if (this.local) {
      // Low-communication training: the worker steps on its own gradient (outer_sync.ts synchronises).
      gpu.write(stages.params.grads, flat);
      return this.squaredNorm(flat);
    }
    if (this.reduced) {
      // The buckets were averaged during backward: only the norm is left (dp index 0 counts it).
      this.reduced = false;
      return this.squaredNorm(flat);
    }
    // dp·cp average: every rank's loss is the mean over equal token counts.
    if (zero) {
      await zero.reduceAfter(flat);
      return zero.squaredNorm((n) => this.counts(n));
    }
    // Packed without the store's alignment gaps, so the allReduce moves exactly Ψ_r = rankParams().dense elements.
    unpackParams(await this.denseAverage.reduce(packParams(flat, this.dense)), flat, this.dense);
    if (this.experts.length) {
      // An expert's gradient already sums its EP group's tokens (the backward all-to-all brought
      // them): summed over the edp ranks holding the same expert, then divided by dp.
      const e = packParams(flat, this.experts), sum = this.expertSum ? await this.expertSum.reduce(e) : e;
      unpackParams(sum.map((v) => v / this.dp), flat, this.experts);
    }
    gpu.write(stages.params.grads, flat);
    // Replicas hold equal averaged gradients: dp / cp index 0 counts dense ones, the first EP group experts.
    return this.coords.cp === 0 ? this.squaredNorm(flat) : 0;
  }

  /**
   * The last micro-batch's backward on `tape`, each gradient bucket allReduced (avg) over dp as
   * soon as no later rule can add to it, overlapping the rest of the backward (buckets.ts; PyTorch
   * DDP's reducer). {@link run} then only reads the norm.
   * @throws (rejects with) a peer's failure or timeout.
   */
  async bucketedBackward(tape: LoggingTape, weightsOnly = false): Promise<void> {
    const { gpu, stages } = this, grads = stages.params.grads;
    this.ddpOverlap = await backwardWithBuckets(gpu, stages.params, this.buckets!, tape, RULES, async (b, host) => {
      await this.dpGrads.allReduce(host, { op: 'avg' });
      gpu.write(sliceOf(grads, b.start, b.end), host);
    }, { weightsOnly });
    this.reduced = true;
  }

  /** What the dp compression carries between steps (grad_compression.ts), keyed `compress.<group>.<name>`. */
  compressionState(): Record<string, Tensor> {
    const out: Record<string, Tensor> = {};
    for (const [k, t] of Object.entries(this.denseAverage.state())) out[`compress.dp.${k}`] = t;
    for (const [k, t] of Object.entries(this.expertSum?.state() ?? {})) out[`compress.edp.${k}`] = t;
    for (const [k, t] of Object.entries(this.zero?.compressionState() ?? {})) out[`compress.dp.${k}`] = t;
    return out;
  }

  /** The last step's bucket launches of its last reducing backward (DDP or ZeRO); empty without buckets. */
  get overlap(): OverlapStats {
    return this.zero?.overlap ?? this.ddpOverlap;
  }

  /** Starts a step: gradients zeroed (ZeRO: its per-step state). */
  async startStep(): Promise<void> {
    if (this.zero) await this.zero.startStep();
    else this.stages.params.zeroGrad();
  }

  /**
   * How the pipeline executor makes, runs and backpropagates the tapes of a step of `m`
   * micro-batches: ZeRO's (zero_sync.ts), DDP's (the last micro-batch's tape logs its nodes and
   * its backward allReduces each bucket as it is finished, {@link bucketedBackward}), or none.
   */
  hooks(m: number): ExecutorHooks {
    if (this.zero) return this.zero.hooks(m);
    if (!this.buckets) return {};
    return bucketedHooks(this.gpu, this.stages, (j) => j === m - 1, (t, _, w) => this.bucketedBackward(t, w));
  }

  /** What this rank's AdamW updates (optimizer.ts AdamWSlot): its whole shard, or its ZeRO pieces. */
  owned(): readonly AdamWSlot[] {
    return this.zero ? this.zero.slots() : this.stages.params.params;
  }

  /** After the update: ZeRO-1/2's all-gather of the updated pieces. Resolves to whether it sent anything. */
  async finish(): Promise<boolean> {
    if (!this.zero || this.zero.stage === 3) return false;
    await this.zero.allGather();
    return true;
  }

  /**
   * Whether parameter `name` counts towards this rank's ‖g‖² so that the world sum counts every
   * parameter once: replicated tp parameters on tp index 0 only, never the head's copy of a tied
   * embedding (stage 0 counts it; Megatron skips shared copies too).
   */
  private counts(name: string): boolean {
    if (this.stages.headCopy && name === this.stages.tied) return false;
    if (this.coords.pp !== 0 && this.stages.shared.includes(name)) return false; // pp rank 0 counts shared blocks
    return countedOnTpRank(name, this.stages.ctx.tp, this.coords.tp);
  }

  /** Σ g² over the parameters {@link counts} selects on this replica, from the store's flat gradient. */
  private squaredNorm(flat: Float32Array): number {
    let s = 0;
    for (const p of this.stages.params.params) {
      // After the sync, dp replicas are equal; an expert's copies are one per EP group.
      const replica = this.experts.length && expertOf(p.name)
        ? this.coords.dp < this.ep
        : this.local || this.coords.dp === 0;
      if (!replica || !this.counts(p.name)) continue;
      for (let i = p.offset; i < p.offset + p.size; i++) s += flat[i] * flat[i];
    }
    return s;
  }
}
