/**
 * `npm run plan`'s view of a compression policy (docs/design.md §28): one rank's step traffic
 * with and without the policy, per parallel dimension — raw and compressed bytes, the ratio, and
 * the α-β time of each on the plan's network — so the trade the hybrid policies make is visible
 * before anything runs. Also the traffic rows of a rank with the gradient matrices PowerSGD needs.
 */
import type { TrainConfig } from '../train/config.ts';
import type { NetworkModel } from '../comm/network.ts';
import { compresses, formatScheme } from '../comm/compression.ts';
import type { ParallelPlan, PlanModel } from './plan.ts';
import { type CommRow, type PlanDim, stepTraffic, type TrafficOptions } from './cost.ts';
import { rankGradMatrices } from './grad_compression.ts';
import { fmtBytes, rowTimeUs, table } from './plan_report.ts';

/** cost.ts stepTraffic for `rank`, given the gradient matrices when the dp scheme is PowerSGD. */
export function rankStepTraffic(
  plan: ParallelPlan,
  model: PlanModel,
  cfg: TrainConfig,
  rank: number,
  opts: TrafficOptions,
): CommRow[] {
  const powerSgd = plan.compress?.dp.kind === 'powersgd';
  return stepTraffic(plan, model, rank, {
    ...opts,
    gradMatrices: powerSgd ? rankGradMatrices(cfg, model.vocabSize, plan, rank) : opts.gradMatrices,
  });
}

/**
 * The compression table of rank `me` (empty when the plan compresses nothing): per dimension its
 * scheme, bytes per step raw and compressed, their ratio, and the predicted µs of each.
 */
export function compressionSection(
  plan: ParallelPlan,
  model: PlanModel,
  cfg: TrainConfig,
  net: NetworkModel,
  opts: TrafficOptions,
  me: number,
): string[] {
  if (!compresses(plan.compress)) return [];
  const raw = stepTraffic({ ...plan, compress: undefined }, model, me, opts);
  const packed = rankStepTraffic(plan, model, cfg, me, opts);
  const dims: PlanDim[] = ['dp', 'tp', 'pp', 'cp', 'ep'];
  const sum = (rows: CommRow[], dim: PlanDim, f: (r: CommRow) => number) =>
    rows.filter((r) => r.dim === dim).reduce((a, r) => a + f(r), 0);
  const bytes = (r: CommRow) => 4 * r.elements, us = (r: CommRow) => rowTimeUs(r, net);
  const exact = packed.every((r) => r.exact);
  const rows = dims.map((d) => {
    const b0 = sum(raw, d, bytes), b1 = sum(packed, d, bytes);
    return [
      d,
      formatScheme(plan.compress![d]),
      fmtBytes(b0),
      `${exact ? '' : '≈'}${fmtBytes(b1)}`,
      b1 ? `${(b0 / b1).toFixed(2)}×` : '–',
      sum(raw, d, us).toFixed(1),
      sum(packed, d, us).toFixed(1),
    ];
  });
  return [
    `compression per dimension, rank ${me} per optimizer step (payload + scales + indices; α-β time on the network above, compression kernels not charged):`,
    table(['dim', 'scheme', 'raw bytes', 'compressed', 'ratio', 'raw µs', 'compressed µs'], rows),
    '',
  ];
}
