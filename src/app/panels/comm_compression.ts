/**
 * The Communication panel's compression figures (docs/design.md#compressed-collectives-and-the-per-dimension-policy):
 * per parallel dimension the bytes the plan's training steps move without and with its compression policy, summed over
 * every rank (compression_report.ts `compressionByDim`, the rows `npm run plan` shows for one rank), beside the bytes
 * the trace measured inside those steps. No DOM: tests/app runs it.
 */
import type { Span } from '../../comm/trace.ts';
import { compressionByDim, shapeCompressionByDim } from '../../perf/compression_report.ts';
import type { CommRow, PlanDim, TrafficOptions } from '../../parallel/cost/cost.ts';
import { type ParallelPlan, type PlanModel, planWorldSize } from '../../parallel/plan/plan.ts';
import { dimOfKey } from '../../parallel/cost/rank_traffic.ts';
import { strategyOf } from '../../parallel/plan/strategy.ts';
import type { TrainConfig } from '../../train/config.ts';

/** What the compression figures need: the plan, its model, the config (PowerSGD's matrices) and the steps covered. */
export interface CompressionInput {
  plan: ParallelPlan;
  model: PlanModel;
  /** The run's config (its trainer's options). */
  cfg?: TrainConfig;
  /**
   * Every rank's step as the model sends it (perf/compression_report.ts rankStepTraffic), without (`raw`) and with
   * (`packed`) the policy; absent, the analytical model of a GPT of the model's shape (PowerSGD's rows inexact).
   */
  rows?: CountedRows;
  /** Optimizer steps the figures cover. */
  steps: number;
}

/** Each rank's derived step rows (index: rank), without and with the plan's compression. */
export interface CountedRows {
  raw: CommRow[][];
  packed: CommRow[][];
}

/** One dimension's bytes over every rank and the steps covered. */
export interface DimBytes {
  dim: PlanDim;
  /** The policy's scheme for the dimension (`none`, `topk:0.1`, …). */
  scheme: string;
  /** Predicted bytes without compression. */
  raw: number;
  /** Predicted bytes under the policy. */
  compressed: number;
  /** False where a compressed row is an estimate (PowerSGD without the config). */
  exact: boolean;
  /** Bytes the trace's send spans inside training steps carried for this dimension; null without spans. */
  measured: number | null;
}

/**
 * The options the analytical model (cost.ts stepTraffic) prices a run of `cfg` with: the trainer's scalar
 * collectives, biases, MoE routing, recomputation; none without a config (an opened run's trace) or for a plan no
 * trainer runs.
 */
export function trafficOptions(plan: ParallelPlan, cfg?: TrainConfig): TrafficOptions {
  if (!cfg) return {};
  let trainer;
  try {
    trainer = strategyOf(plan, cfg.arch);
  } catch {
    trainer = undefined; // the Setup refuses such a plan; the prediction still shows
  }
  const { bias, moeTopK: topK, capacityFactor, moeEvery, recompute } = cfg;
  return { bias, topK, capacityFactor, moeEvery, recompute, trainer };
}

const bytesOf = (rows: readonly CommRow[]) => rows.reduce((a, r) => a + 4 * r.elements, 0);

/**
 * Per dimension with traffic, the predicted bytes of `steps` steps on every rank
 * without and with the plan's policy, and with `spans` the measured bytes; empty when the plan
 * compresses nothing. Measured bytes count send spans that carry a `step` (the prediction covers
 * the training steps only, not the parameter broadcast or evaluation; a trace without step marks
 * counts every send), keyed by their group's dimension as the run's own accounting keys them
 * (rank_traffic.ts `dimOfKey`).
 * @throws Error from stepTraffic when the plan is invalid for the model, or the model is not a GPT and no rows are given.
 */
export function compressionBytes(input: CompressionInput, spans?: readonly Span[]): DimBytes[] {
  const { plan, model, cfg, steps, rows } = input;
  const byDim = new Map<PlanDim, DimBytes>();
  for (let r = 0; r < planWorldSize(plan); r++) {
    const dims = rows
      ? compressionByDim(plan, rows.raw[r], rows.packed[r])
      : shapeCompressionByDim(plan, model, trafficOptions(plan, cfg), r);
    for (const d of dims) {
      const acc = byDim.get(d.dim) ?? { dim: d.dim, scheme: d.scheme, raw: 0, compressed: 0, exact: true, measured: null };
      acc.raw += steps * bytesOf(d.raw);
      acc.compressed += steps * bytesOf(d.packed);
      acc.exact &&= d.packed.every((x) => x.exact);
      byDim.set(d.dim, acc);
    }
  }
  if (spans) {
    for (const d of byDim.values()) d.measured = 0;
    // A trace read back from trace.json has no step marks: then every send counts.
    const marked = spans.some((s) => s.kind === 'send' && s.step !== undefined);
    for (const s of spans) {
      if (s.kind !== 'send' || (marked && s.step === undefined)) continue;
      const d = byDim.get(dimOfKey(s.group));
      if (d) d.measured! += s.bytes;
    }
  }
  return [...byDim.values()].filter((d) => d.raw > 0);
}
