/**
 * What run.ts drives on a rank: the mesh trainer (mesh_trainer.ts, every plan) behind one small
 * interface — step, the rank's ParamStore, what its memory and checkpoint hold, and how the run
 * validates (rank 0 alone where it holds the whole model, every rank together under ZeRO-3).
 */
import type { LossScaler } from '../../train/loss_scale.ts';
import type { Communicator } from '../../comm/communicator.ts';
import type { Gpu } from '../../gpu/context.ts';
import type { Tensor } from '../../gpu/tensor.ts';
import type { TextDataset } from '../../data/dataset.ts';
import type { TrainConfig } from '../../train/config.ts';
import type { LanguageModel } from '../../models/model.ts';
import type { ParamStore } from '../../nn/params.ts';
import { MeshTrainer } from '../mesh/mesh_trainer.ts';
import type { PriceActions } from '../mesh/sim_compute.ts';
import type { ParallelPlan } from '../plan/plan.ts';
import type { Sent } from '../mesh/traffic.ts';
import type { RankRouting } from '../expert/moe_routing.ts';

/** A rank's trainer as run.ts drives it. */
export interface Built {
  step(
    s: number,
  ): Promise<
    {
      loss: number;
      lr: number;
      gradNorm: number;
      sent: Sent;
      lossScale?: number;
      skipped?: boolean;
      routing?: RankRouting;
    }
  >;
  /** f16-mixed: the loss scaler, whose state a checkpoint carries; null otherwise. */
  scaler: LossScaler | null;
  params: ParamStore;
  /** Model-state bytes (ZeRO: what the stage keeps). */
  memory: { params: number; grads: number; optimizer: number };
  /** The whole model, when this rank holds all of it (rank 0 validates it alone). */
  evalModel?: LanguageModel;
  /** Validation loss that every rank computes together (ZeRO-3 gathers the layers for it). */
  evaluate?: () => Promise<number>;
  /** What a checkpoint holds. */
  state: () => Record<string, Tensor>;
  /** Before a save: waits for outer allReduces in flight and stores their results in the state (outer_sync.ts). */
  settle?: () => Promise<void>;
  dispose(): void;
}

/**
 * Builds rank `world.rank`'s model shard and trainer (every rank of the world calls it).
 * @param v vocabulary size; `bucketBytes` DP / ZeRO gradient buckets; `priceActions` the simulated
 *   clock's compute prices (MeshTrainer's opts, needed under a network model with a peak).
 * @throws Error from the trainer's constructor (e.g. a batch not divisible by the ranks).
 */
export function buildTrainer(
  gpu: Gpu,
  world: Communicator,
  plan: ParallelPlan,
  cfg: TrainConfig,
  data: TextDataset,
  v: number,
  bucketBytes?: number | 'layer',
  priceActions?: PriceActions,
): Built {
  const t = new MeshTrainer(gpu, cfg, plan, world, data, v, { bucketBytes, priceActions }), { zero } = t.sync;
  // Without tp, pp or ep every rank holds the whole model (dp and cp replicas): rank 0 validates
  // it, unless ZeRO-3 sharded its values, when every rank gathers the layers for the pass.
  const whole = plan.tp === 1 && plan.pp === 1 && plan.ep === 1;
  const sharded = zero?.stage === 3;
  return {
    step: (s) => t.step(s),
    scaler: t.scaler,
    params: t.stages.params,
    memory: t.memory(),
    evalModel: whole && !sharded ? t.stages.model : undefined,
    evaluate: whole
      ? (sharded ? () => zero.evaluate(data, cfg) : undefined)
      : t.validation
      ? () => t.validation!.run()
      : undefined,
    state: () => t.trainingState(),
    settle: t.outer ? () => t.outer!.settle() : undefined,
    dispose: () => t.destroy(),
  };
}
