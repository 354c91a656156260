/**
 * The trainer each strategy runs on a rank (run.ts dispatches by plan.ts `strategyOf`), behind
 * one small interface: step, the rank's ParamStore, what its memory and checkpoint hold, and the
 * whole model where the rank has it (for validation).
 */
import type { Communicator } from '../comm/communicator.ts';
import type { Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import type { TextDataset } from '../data/dataset.ts';
import type { TrainConfig } from '../train/config.ts';
import { createModel } from '../models/registry.ts';
import type { LanguageModel } from '../models/model.ts';
import type { ParamStore } from '../nn/params.ts';
import { type ZeroStage, ZeroTrainer } from './zero.ts';
import { MeshTrainer } from './mesh_trainer.ts';
import { rankModel } from './rank_model.ts';
import { zeroSplit } from './zero_split.ts';
import type { ParallelPlan, StrategyKind } from './plan.ts';
import type { Sent } from './traffic.ts';

/** A rank's trainer as run.ts drives it. */
export interface Built {
  step(s: number): Promise<{ loss: number; lr: number; gradNorm: number; sent: Sent }>;
  params: ParamStore;
  /** Memory override (ZeRO: what the stage keeps). */
  memory?: { params: number; grads: number; optimizer: number };
  /** The whole model, when this rank holds all of it (rank 0 validates it alone). */
  evalModel?: LanguageModel;
  /** Validation loss that every rank computes together (ZeRO-3 gathers the layers for it). */
  evaluate?: () => Promise<number>;
  /** Buffer sizes of the dense gradient sync calls, for stepTraffic. */
  buckets?: number[];
  /** What a checkpoint holds (default: the ParamStore's values and AdamW moments). */
  state?: () => Record<string, Tensor>;
  dispose(): void;
}

/**
 * Builds rank `world.rank`'s model shard and trainer for `kind` (every rank of the world calls it).
 * @param v vocabulary size; `bucketBytes` DP / ZeRO gradient buckets.
 * @throws Error from the trainer's constructor (e.g. a batch not divisible by the ranks).
 */
export async function buildTrainer(
  gpu: Gpu,
  world: Communicator,
  plan: ParallelPlan,
  kind: StrategyKind,
  cfg: TrainConfig,
  data: TextDataset,
  v: number,
  bucketBytes?: number | 'layer',
): Promise<Built> {
  const replica = () => createModel(gpu, cfg, v);
  const own = (
    t: Built['step'],
    params: ParamStore,
    extra: Partial<Built> = {},
    dispose = () => params.destroy(),
  ): Built => ({ step: t, params, dispose, ...extra });
  switch (kind) {
    case 'zero': {
      if (plan.zero >= 2 && cfg.recompute !== 'none') {
        throw new Error(
          `recompute ${cfg.recompute} with ZeRO-${plan.zero} is not built (its per-layer gathers follow the forward); use ZeRO-1 or recompute none`,
        );
      }
      // Over a tp / cp split, ZeRO shards each rank's model shard over its dp·cp group (zero_split.ts).
      const rm = plan.tp > 1 || plan.cp > 1 ? rankModel(gpu, cfg, plan, world, v) : null;
      const model = rm?.stages.model ?? replica(), sync = rm?.sync() ?? world;
      const t = await ZeroTrainer.create(gpu, model, data, cfg, sync, {
        bucketBytes,
        stage: plan.zero as ZeroStage,
        split: rm ? zeroSplit(rm, plan, world) : undefined,
      });
      // A tp shard is not the whole model: no rank validates alone (as the mesh trainer's).
      const whole = plan.tp === 1;
      return own((s) => t.step(s), model.params, {
        memory: t.memory(),
        evalModel: whole && plan.zero < 3 ? model : undefined,
        evaluate: whole && plan.zero === 3 ? () => t.evaluate(data, cfg) : undefined,
        buckets: t.pieces.map((p) => p.c * sync.size),
        state: () => t.trainingState(),
      }, () => t.destroy());
    }
    case 'mesh': {
      const t = new MeshTrainer(gpu, cfg, plan, world, data, v, { bucketBytes });
      // Without tp, pp or ep every rank holds the whole model (dp and cp replicas): rank 0 validates it.
      const whole = plan.tp === 1 && plan.pp === 1 && plan.ep === 1 ? { evalModel: t.stages.model } : {};
      const buckets = t.sync.buckets?.map((b) => b.end - b.start);
      return own((s) => t.step(s), t.stages.params, { ...whole, buckets }, () => t.destroy());
    }
  }
}
