/**
 * One mesh-trainer rank of a test run (src/parallel/mesh/mesh_trainer.ts), shared by the in-process
 * runs (mesh_harness.ts) and the module workers (mesh_worker.ts). Imports nothing from the
 * other test harnesses, whose top-level reads of the data file do not survive worker bundling.
 */
import type { Communicator } from '../../src/comm/communicator.ts';
import type { Gpu } from '../../src/gpu/context.ts';
import { parseConfig, type TrainConfig } from '../../src/train/config.ts';
import { CharTokenizer } from '../../src/data/tokenizer.ts';
import { TextDataset } from '../../src/data/dataset.ts';
import { MeshTrainer } from '../../src/parallel/mesh/mesh_trainer.ts';
import type { ParallelPlan } from '../../src/parallel/plan/plan.ts';
import type { Sent } from '../../src/parallel/mesh/traffic.ts';
import type { RankRouting } from '../../src/parallel/expert/moe_routing.ts';
import type { Span } from '../../src/parallel/pipeline/pipeline_sim.ts';

export type Named = Record<string, Float32Array>;

export interface MeshRunResult {
  losses: number[];
  gradNorms: number[];
  sent: Sent[];
  grads0: Named;
  params: Named;
  /** Parameter elements this rank holds. */
  count: number;
  /** Length of the store's flat (aligned) buffer, for ZeRO-1's pieces. */
  flat: number;
  /**
   * Under ZeRO: the call sizes of its dense and expert buckets, Σ c_k of the shared block's units
   * (zero_sync.ts) and the model-state bytes the rank holds (MeshTrainer.memory).
   */
  zero?: {
    buckets: number[];
    expertBuckets: number[];
    shared: number;
    memory: { params: number; grads: number; optimizer: number };
  };
  /** Per step: this rank's compute / comm / idle spans (ms from `origins`). */
  timelines: Span[][];
  /** Per step: the wall clock (epoch ms) of the step's start. */
  origins: number[];
  /** Per step: a MoE rank's token-group demand (moe_routing.ts), undefined when it routes no group of its own. */
  routings: (RankRouting | undefined)[];
}

/**
 * The config a plan's ranks run: `over`'s global batch (batchSize × gradAccum) split into the
 * plan's micro-batches, micro-batch j its rows [j·B, (j+1)·B) (src/parallel/run/run.ts trainerConfig).
 */
export function microConfig(plan: ParallelPlan, over: Partial<TrainConfig>): Partial<TrainConfig> {
  const c = parseConfig(over), m = plan.microBatches;
  return { ...over, batchSize: (c.batchSize * c.gradAccum) / m, gradAccum: m };
}

/**
 * The plain single-rank run of `over`'s global batch: batchSize G = batchSize × gradAccum, one
 * micro-batch. It reads the rows every split of G reads (data/dataset.ts batch order), so it is
 * the baseline each plan is checked against; the float sums differ only in order.
 */
export function plainConfig(over: Partial<TrainConfig>): Partial<TrainConfig> {
  const c = parseConfig(over);
  return { ...over, batchSize: c.batchSize * c.gradAccum, gradAccum: 1 };
}

/**
 * Trains `over` (its global batch, see {@link microConfig}) for cfg.steps steps on this rank of
 * `plan` (every rank calls it with the same arguments); `opts` as MeshTrainer's (DDP's bucket size).
 */
export async function trainMeshRank(
  gpu: Gpu,
  comm: Communicator,
  plan: ParallelPlan,
  over: Partial<TrainConfig>,
  text: string,
  opts: { bucketBytes?: number | 'layer' } = {},
): Promise<MeshRunResult> {
  const cfg = parseConfig(microConfig(plan, over));
  const tok = CharTokenizer.fromText(text);
  const data = new TextDataset(tok.encode(text), cfg.blockSize);
  const t = new MeshTrainer(gpu, cfg, plan, comm, data, tok.vocabSize, opts);
  const res: MeshRunResult = {
    losses: [],
    gradNorms: [],
    sent: [],
    grads0: {},
    params: {},
    count: t.stages.params.count,
    flat: t.stages.params.flatSize,
    timelines: [],
    origins: [],
    routings: [],
  };
  const zero = t.sync.zero;
  if (zero) {
    const [buckets, expertBuckets, shared] = [
      zero.callSizes(),
      zero.callSizes(true),
      zero.shards.piecesOf(t.stages.shared),
    ];
    res.zero = { buckets, expertBuckets, shared, memory: t.memory() };
  }
  try {
    for (let s = 0; s < cfg.steps; s++) {
      const rec = await t.step(s);
      res.losses.push(rec.loss);
      res.gradNorms.push(rec.gradNorm);
      res.sent.push(rec.sent);
      res.timelines.push(rec.timeline);
      res.origins.push(rec.origin);
      res.routings.push(rec.routing);
      if (s === 0) res.grads0 = Object.fromEntries(await t.gradients());
    }
    res.params = Object.fromEntries(await t.parameters());
  } finally {
    t.destroy();
  }
  return res;
}
