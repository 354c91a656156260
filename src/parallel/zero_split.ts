/**
 * ZeRO-2 / ZeRO-3 over a tensor- and / or context-parallel model (zero.ts with pp = 1): each
 * rank's model is its tp shard over its RankContext (rank_model.ts), and ZeRO shards that shard
 * further over the dp·cp ranks that hold the same one (Megatron's data-parallel group with cp),
 * as DeepSpeed's ZeRO does over Megatron's model-parallel units.
 *
 * What changes against a whole-model replica:
 * - rows: the rank's dp index picks its rows of the global batch, its cp index its tokens;
 * - the forward is ModelStages.forward (tp collectives and ring / Ulysses attention inside);
 * - the global ‖g‖²: the reduced pieces are disjoint over dp·cp but the tp shards are not the
 *   whole model, so the squares are summed over the world, replicated parameters counted on tp
 *   index 0 only (their gradients are equal on every tp rank without sequence parallelism);
 * - the loss is averaged over the world (tp ranks hold equal losses after the vocab-parallel
 *   cross-entropy) on the same `world/scalars` group.
 * Not composed (refused up front): pp > 1 (ZeRO-2/3's per-layer units would have to follow the
 * pipeline schedule) and sequence parallelism (its partial gradients need a tp sum first).
 */
import type { Tensor } from '../gpu/tensor.ts';
import type { Communicator } from '../comm/communicator.ts';
import type { ParallelPlan } from './plan.ts';
import type { RowsForward } from './local_batches.ts';
import type { RankModel } from './rank_model.ts';
import { countedOnTpRank } from './tp_table.ts';

/** What zero.ts needs to train a split model instead of a replica. */
export interface ZeroSplit {
  /** The rank's forward of its rows (and cp tokens). */
  forward: RowsForward;
  /** Global positions of the rank's tokens of every row (cp), else undefined (all). */
  positions?: Int32Array;
  /** The rank's dp index and the dp degree: which rows it reads. */
  dp: { index: number; size: number };
  /** The world communicator: ‖g‖² and loss sums. */
  world: Communicator;
  /** Whether parameter `name` counts towards this rank's share of ‖g‖². */
  counts: (name: string) => boolean;
  /** The tape's value → gradient map, built after ZeRO moved the store's buffers. */
  gradMap(): Map<Tensor, Tensor>;
  /** Views read in place of parameter values (buckets.ts BucketFinality). */
  aliases(): ReadonlyMap<Tensor, Tensor>;
}

/**
 * Checks that ZeRO-`plan.zero` composes with the plan's model split.
 * @throws Error naming the rule: ZeRO-2/3 with pp > 1 or with sequence parallelism.
 */
export function checkZeroSplit(plan: ParallelPlan): void {
  if (plan.pp > 1) {
    throw new Error(
      `not supported yet: zero ${plan.zero} combined with pp ${plan.pp} (ZeRO-2/3 run with dp, tp and cp; use zero 1 with pipelines)`,
    );
  }
  if (plan.sp) {
    throw new Error(
      `not supported yet: zero ${plan.zero} combined with sequence parallelism (--sp); use zero 1 or drop --sp`,
    );
  }
}

/** The ZeroSplit of rank model `rm` in `world` for `plan` (see the module doc). */
export function zeroSplit(rm: RankModel, plan: ParallelPlan, world: Communicator): ZeroSplit {
  checkZeroSplit(plan);
  const { stages, coords } = rm, tp = stages.ctx.tp;
  return {
    forward: async (tape, x, y, b, t, gradScale, beforeBlock) =>
      (await stages.forward(tape, x, y, b, t, gradScale, beforeBlock)).loss!,
    positions: plan.cp > 1 ? rm.positions : undefined,
    dp: { index: coords.dp, size: plan.dp },
    world,
    counts: (name) => countedOnTpRank(name, tp, coords.tp),
    gradMap: () => stages.ctx.gradMap(stages.params),
    aliases: () => stages.ctx.biasAliases(),
  };
}
