/**
 * Per-step traffic counted from the model itself (docs/design.md#accounting-derived-from-the-model): one
 * optimizer step of a rank's real MeshTrainer (its stages, pipeline executor, gradient sync or ZeRO, scalar
 * collectives) runs over a meta GPU that reads zeros and a counting world (comm/counting.ts) in which this rank is
 * the only one alive. What it would send is counted per `group/op`, in the keys a running rank's meter
 * (mesh/traffic.ts) reports, so rank_traffic.ts sentByDim reads both alike. No architecture is described here:
 * whatever collectives its layers call under the plan's split are the ones counted.
 *
 * Data-dependent traffic is counted as the zeros route it: a MoE layer's all-to-alls move fixed capacity buffers
 * (GShard), so their size does not depend on the routing.
 */
import type { TrainConfig } from '../../train/config.ts';
import type { TextDataset } from '../../data/dataset.ts';
import { MetaGpu } from '../../gpu/meta.ts';
import { loadShaders, type ShaderName } from '../../gpu/shaders.ts';
import { type CountedCall, countingWorld, type Counts, countsOf } from '../../comm/counting.ts';
import { MeshTrainer } from '../mesh/mesh_trainer.ts';
import { type ParallelPlan, planWorldSize } from '../plan/plan.ts';

/** Options of {@link derivedStepTraffic}. */
export interface DerivedTrafficOptions {
  /** The optimizer step to run (0-based; recurrent depth draws its r from it). Default 0. */
  step?: number;
  /** The DDP / ZeRO bucket size, as MeshTrainer's. */
  bucketBytes?: number | 'layer';
  /** The WGSL sources (a real Gpu's `shaders`); absent, read once with shaders.ts loadShaders. */
  shaders?: Record<ShaderName, string>;
}

let sources: Promise<Record<ShaderName, string>> | null = null;

/** What {@link derivedStepTraffic} counted. */
export interface DerivedStep {
  /** Elements the rank sends in the step, by `group/op` (mesh/traffic.ts Sent). */
  sent: Counts;
  /** The same calls one entry per (group, op, buffer size). */
  calls: CountedCall[];
  /**
   * Under ZeRO: the call sizes of the dense and expert buckets, of their sequence-parallel partials (ZeRO-2/3
   * under sp) and Σ c_k of the shared block's units
   * (zero_sync.ts), what cost.ts stepTraffic takes to count the same calls exactly.
   */
  zero?: { buckets: number[]; expertBuckets: number[]; spBuckets?: number[]; sharedPieces: number };
}

/** A dataset of zeros: every row any step asks for, token 0 throughout (a meta GPU's values are zeros anyway). */
function zeroData(): TextDataset {
  const rows = (_split: string, T: number, _seed: number, _step: number, from: number, to: number) => {
    const n = (to - from) * T;
    return { x: new Int32Array(n), y: new Int32Array(n) };
  };
  return { rows } as unknown as TextDataset;
}

/**
 * Elements rank `rank` of `plan` sends in optimizer step `o.step` of `cfg` (the config a rank trains with:
 * batchSize the rows of one micro-batch over all dp ranks, gradAccum = plan.microBatches), by `group/op`
 * (mesh/traffic.ts Sent), with the ZeRO call sizes. Construction's messages (none: building a model communicates nothing) are not counted.
 * @throws Error from MeshTrainer for a plan the model does not take (mesh_plan.ts checkMeshPlan names why).
 */
export async function derivedStepTraffic(
  cfg: TrainConfig,
  plan: ParallelPlan,
  vocabSize: number,
  rank: number,
  o: DerivedTrafficOptions = {},
): Promise<DerivedStep> {
  // The kernels specialise their WGSL before dispatching: the meta GPU carries the real sources (read once).
  const shaders = o.shaders ?? await (sources ??= loadShaders());
  const gpu = new MetaGpu({ reads: 'zeros', shaders }),
    counting = countingWorld(rank, planWorldSize(plan));
  const t = new MeshTrainer(gpu, cfg, plan, counting.world, zeroData(), vocabSize, { bucketBytes: o.bucketBytes });
  try {
    counting.take();
    await t.step(o.step ?? 0);
    const calls = counting.takeCalls(), z = t.sync.zero, sent = countsOf(calls);
    if (!z) return { sent, calls };
    return {
      sent,
      calls,
      zero: {
        buckets: z.callSizes(),
        expertBuckets: z.callSizes(true),
        ...(plan.sp && z.stage > 1 && { spBuckets: z.spCallSizes() }),
        sharedPieces: z.shards.piecesOf(t.stages.shared),
      },
    };
  } finally {
    t.destroy();
  }
}
