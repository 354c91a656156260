/**
 * The row and option types of the plan cost model's per-step traffic (cost.ts stepTraffic,
 * docs/design.md#communication-per-optimizer-step): one row per kind of message a rank sends, and the knobs that the
 * trainer's own choices (its buckets, its scalar collectives) feed in so the rows are exact.
 */
import type { Algorithm } from '../../comm/call_options.ts';
import type { Collective } from '../../comm/cost.ts';
import type { StrategyKind } from '../plan/plan.ts';
import type { RankGradMatrices } from './compressed_rows.ts';

export type PlanDim = 'dp' | 'tp' | 'pp' | 'cp' | 'ep';

/** One kind of traffic of one rank in one optimizer step. */
export interface CommRow {
  dim: PlanDim;
  what: string;
  collective: Collective | 'send';
  algorithm: Algorithm | 'p2p';
  /** World ranks of the group (sender first for `send`). */
  group: number[];
  calls: number;
  /** Elements of one call's buffer (see the module doc); for `send` the message size. */
  n: number;
  /** Elements this rank sends over the step (4 bytes each). */
  elements: number;
  messages: number;
  /** False where the count depends on choices the formula cannot see (ZeRO-2/3 per-layer padding without the trainer's buckets). */
  exact: boolean;
  /**
   * Bulk traffic the plan's compression policy applies to (compressed_rows.ts): activations and
   * their gradients (`act`), or the dp gradient sync of the dense or expert parameters.
   */
  bulk?: 'act' | 'dense' | 'expert';
  /** The compression scheme this row's words are counted under (compressed_rows.ts). */
  scheme?: string;
}

/** Knobs of cost.ts `stepTraffic`: collective algorithm (default ring), MoE routing, Linear biases. */
export interface TrafficOptions {
  algorithm?: 'ring' | 'recursive-doubling' | 'rabenseifner' | 'direct';
  /**
   * Activation recomputation (src/models/recompute.ts): its backward runs the forward of each block
   * (full) or sequence-mixer core (selective: attention, the selective scan, linear attention) again,
   * with that forward's communication: full repeats the row-parallel outputs' allReduces (sp: their
   * all-gathers and reduce-scatters) and the attention's forward sends; selective the attention's
   * (a recurrent core moves nothing). Default none.
   */
  recompute?: 'none' | 'selective' | 'full';
  topK?: number;
  capacityFactor?: number;
  bias?: boolean;
  /**
   * MoE layers are the blocks i with i % moeEvery = moeEvery − 1 (models/moe_layer.ts
   * isMoELayer; default 1: every block): they set the expert parameters and the all-to-alls.
   */
  moeEvery?: number;
  /**
   * Dense gradient buckets as the trainer calls them (elements of each call's buffer: the
   * allReduce vector, or the padded d·c_k of a ZeRO reduce-scatter / all-gather); absent: one
   * flat buffer of Ψ (padded to a multiple of the group for ZeRO).
   */
  buckets?: number[];
  /** Under ZeRO with ep: the expert buckets' call sizes over their expert-data-parallel group, as `buckets`. */
  expertBuckets?: number[];
  /** Under sp with ZeRO-2/3: each bucket's sequence-parallel partial elements (zero_sync.ts spCallSizes). */
  spBuckets?: number[];
  /** ZeRO-2/3 with pp: Σ c_k of the shared block's units, summed piecewise over pp (zero_pieces.ts piecesOf). */
  sharedPieces?: number;
  /**
   * The trainer that will run the plan (strategy.ts `strategyOf`): its small scalar allReduces follow
   * it (mesh: one 2-element [norm, loss] over the world instead of the dp loss average and ZeRO's
   * norm). Absent (a plan no trainer runs): the dp loss average and ZeRO's norm over dp·cp.
   */
  trainer?: StrategyKind;
  /**
   * This rank's gradient matrices (grad_compression.ts rankGradMatrices), which PowerSGD's words
   * depend on; absent, a dp=powersgd row is marked inexact.
   */
  gradMatrices?: RankGradMatrices;
}
