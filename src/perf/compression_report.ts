/**
 * `npm run plan`'s view of a compression policy (docs/design.md#compressed-collectives-and-the-per-dimension-policy):
 * one rank's step traffic with and without the policy, per parallel dimension — raw and compressed bytes, the ratio,
 * and the α-β time of each on the plan's network — so the trade the hybrid policies make is visible before anything
 * runs. Also the traffic rows of a rank as its model sends them.
 */
import type { TrainConfig } from '../train/config.ts';
import type { NetworkModel } from '../comm/network.ts';
import { compresses, formatScheme } from '../comm/compression.ts';
import type { ParallelPlan, PlanModel } from '../parallel/plan/plan.ts';
import { type CommRow, type PlanDim, stepTraffic, type TrafficOptions } from '../parallel/cost/cost.ts';
import { derivedTraffic, repriced } from '../parallel/cost/derived_rows.ts';
import { trainerConfig } from '../parallel/run/run.ts';
import { fmtBytes, rowTimeUs, table } from './plan_report.ts';

/**
 * Rank `rank`'s step traffic as its model sends it (derived_rows.ts derivedTraffic, for the config the rank trains
 * with), priced with `opts.algorithm` when given; `vocabSize` is the tokenizer's. With `raw`, the plan less its
 * compression policy.
 * @throws Error from the trainer for a plan the model does not take.
 */
export async function rankStepTraffic(
  plan: ParallelPlan,
  cfg: TrainConfig,
  vocabSize: number,
  rank: number,
  opts: Pick<TrafficOptions, 'algorithm'> = {},
  raw = false,
): Promise<CommRow[]> {
  const p = raw ? { ...plan, compress: undefined } : plan;
  return repriced(await derivedTraffic(trainerConfig(p, cfg), p, vocabSize, rank), opts.algorithm, rank);
}

/** One parallel dimension's share of a rank's step traffic, without and with the plan's policy. */
export interface DimCompression {
  dim: PlanDim;
  /** The dimension's scheme as the policy spells it (`none`, `topk:0.1`, …). */
  scheme: string;
  /** The rows without compression (stepTraffic of the plan less its policy). */
  raw: CommRow[];
  /** The rows under the policy (compressed rows carry `scheme`). */
  packed: CommRow[];
}

/**
 * Rank `me`'s step traffic per dimension without (`raw`) and with (`packed`) the plan's compression: the rows behind
 * {@link compressionSection}, shared with the demo's Communication panel. Empty when the plan compresses nothing.
 */
export function compressionByDim(plan: ParallelPlan, raw: CommRow[], packed: CommRow[]): DimCompression[] {
  if (!compresses(plan.compress)) return [];
  const dims: PlanDim[] = ['dp', 'tp', 'pp', 'cp', 'ep'];
  return dims.map((dim) => ({
    dim,
    scheme: formatScheme(plan.compress![dim]),
    raw: raw.filter((r) => r.dim === dim),
    packed: packed.filter((r) => r.dim === dim),
  }));
}

/**
 * The analytical {@link compressionByDim} of rank `me` for a GPT known by its shape (cost.ts stepTraffic), PowerSGD's
 * rows inexact (no gradient matrices).
 */
export function shapeCompressionByDim(
  plan: ParallelPlan,
  model: PlanModel,
  opts: TrafficOptions,
  me: number,
): DimCompression[] {
  if (!compresses(plan.compress)) return [];
  return compressionByDim(
    plan,
    stepTraffic({ ...plan, compress: undefined }, model, me, opts),
    stepTraffic(plan, model, me, opts),
  );
}

/**
 * The compression table of rank `me` (empty when the plan compresses nothing): per dimension its
 * scheme, bytes per step raw and compressed, their ratio, and the predicted µs of each.
 */
export function compressionSection(
  plan: ParallelPlan,
  raw: CommRow[],
  packed: CommRow[],
  net: NetworkModel,
  me: number,
): string[] {
  const dims = compressionByDim(plan, raw, packed);
  if (!dims.length) return [];
  const sum = (rows: CommRow[], f: (r: CommRow) => number) => rows.reduce((a, r) => a + f(r), 0);
  const bytes = (r: CommRow) => 4 * r.elements, us = (r: CommRow) => rowTimeUs(r, net);
  const exact = dims.every((d) => d.packed.every((r) => r.exact));
  const rows = dims.map((d) => {
    const b0 = sum(d.raw, bytes), b1 = sum(d.packed, bytes);
    return [
      d.dim,
      d.scheme,
      fmtBytes(b0),
      `${exact ? '' : '≈'}${fmtBytes(b1)}`,
      b1 ? `${(b0 / b1).toFixed(2)}×` : '–',
      sum(d.raw, us).toFixed(1),
      sum(d.packed, us).toFixed(1),
    ];
  });
  return [
    `compression per dimension, rank ${me} per optimizer step (payload + scales + indices; α-β time on the network above, compression kernels not charged):`,
    table(['dim', 'scheme', 'raw bytes', 'compressed', 'ratio', 'raw µs', 'compressed µs'], rows),
    '',
  ];
}
