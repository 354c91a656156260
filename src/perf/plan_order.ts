/**
 * How the plan search (plan_search.ts) and the Plan explorer (src/app/panels/plan_explore.ts) order plans and which
 * they call equivalent (docs/design.md#a-performance-model-that-chooses-the-plan). The model is not exact: on
 * Megatron-LM's Table 1 its error reaches {@link MODEL_ERROR_BAND}, so plans whose predicted step times differ by less
 * than that are not told apart by it; they are marked equivalent to the best, and ties are broken by what practice
 * prefers when the model cannot choose: fewer ranks in groups that leave a node, then less memory per rank.
 */
import type { ParallelPlan } from '../parallel/plan/plan.ts';
import type { Recompute } from '../models/recompute.ts';
import { PAPER_ROWS, predictPaperRow } from './paper_validation.ts';
import type { StepPrediction } from './step_time.ts';

/** What the order reads of one ranked plan (plan_search.ts's Candidate). */
export interface Ordered {
  plan: ParallelPlan;
  recompute: Recompute;
  prediction: Pick<StepPrediction, 'step'> & { memory: { total: number } };
  /** {@link crossingRanks} of the plan on the search's network. */
  crossing: number;
}

/**
 * The equivalence band, relative to the best predicted step time: the model's largest absolute error on the rows of
 * Megatron-LM's Table 1 (Narayanan et al. 2021; src/perf/paper_validation.ts, docs/plan.md's validation table),
 * recomputed from the model itself so that it follows any change to it (+18.3% at the time of writing, the 76.1B row).
 * The error is of achieved TFLOP/s per GPU (predicted / published − 1), taken as the relative step-time band as is.
 * A plan is equivalent to the best when its predicted step ≤ best × (1 + band).
 */
export const MODEL_ERROR_BAND: number = Math.max(
  ...PAPER_ROWS.filter((r) => r.source.endsWith('Table 1')).map((r) => Math.abs(predictPaperRow(r).error)),
);

/**
 * Ranks in the plan's groups that cross a node: for each of the tp, cp, pp and dp groups (mesh order
 * [dp, pp, cp, tp], tp fastest, as src/comm/mesh.ts), its size when its first and last rank are `ranksPerNode` or more
 * apart (the rule step_time.ts prices a group's link by: such a group runs on the inter-node link), summed. Unitless
 * count of ranks; 0 when every group stays inside a node.
 * @throws Error when `ranksPerNode` is not a positive integer.
 */
export function crossingRanks(plan: ParallelPlan, ranksPerNode: number): number {
  if (!Number.isInteger(ranksPerNode) || ranksPerNode < 1) {
    throw new Error(`ranks per node must be a positive integer, got ${ranksPerNode}`);
  }
  const { tp, cp, pp, dp } = plan;
  const groups: [size: number, stride: number][] = [[tp, 1], [cp, tp], [pp, tp * cp], [dp, tp * cp * pp]];
  return groups.reduce((n, [size, stride]) => n + ((size - 1) * stride >= ranksPerNode ? size : 0), 0);
}

/** Significant digits at which two predicted step times count as equal (the closed form's rounding noise is far below). */
export const TIE_DIGITS = 9;

/** The final key: every enumerated field of the plan and the recompute mode, in a fixed order. */
const planKey = (c: Ordered): (number | string)[] => {
  const p = c.plan;
  return [
    p.dp,
    p.tp,
    p.pp,
    p.cp,
    p.cpKind,
    p.zero,
    p.sp ? 1 : 0,
    p.schedule,
    p.virtualStages,
    p.microBatches,
    c.recompute,
  ];
};

/**
 * The order of ranked plans, a total order that never depends on enumeration order:
 * 1. predicted step time, shorter first (times equal to {@link TIE_DIGITS} significant digits tie);
 * 2. fewer ranks in groups that cross nodes ({@link crossingRanks}): their traffic shares the node's links;
 * 3. less memory per rank (the worst rank's bytes);
 * 4. the plan's fields (dp, tp, pp, cp, cp kind, ZeRO, sp, schedule, v, micro-batches, recompute) compared in that
 *    order, numbers ascending and names by code point, so equal plans in every other respect still sort one way.
 * Used by searchPlans (and through it the explorer) as `ranked.sort(comparePlans)`.
 * @returns negative when `a` comes first, positive when `b` does, 0 only for the same plan and recompute mode.
 */
export function comparePlans(a: Ordered, b: Ordered): number {
  const ta = Number(a.prediction.step.toPrecision(TIE_DIGITS)), tb = Number(b.prediction.step.toPrecision(TIE_DIGITS));
  if (ta !== tb) return ta - tb;
  if (a.crossing !== b.crossing) return a.crossing - b.crossing;
  if (a.prediction.memory.total !== b.prediction.memory.total) {
    return a.prediction.memory.total - b.prediction.memory.total;
  }
  const ka = planKey(a), kb = planKey(b);
  for (let i = 0; i < ka.length; i++) {
    if (ka[i] !== kb[i]) return ka[i] < kb[i] ? -1 : 1;
  }
  return 0;
}

/**
 * Whether each plan of `ranked` (sorted by {@link comparePlans}, best first) is inside the equivalence band of the
 * best: step ≤ best step × (1 + band). `band` is relative (0.183 = 18.3%).
 * @throws Error when `band` is negative or not finite.
 */
export function withinBand(ranked: readonly Ordered[], band: number = MODEL_ERROR_BAND): boolean[] {
  if (!Number.isFinite(band) || band < 0) throw new Error(`the equivalence band must be a number ≥ 0, got ${band}`);
  if (!ranked.length) return [];
  const limit = ranked[0].prediction.step * (1 + band);
  return ranked.map((c) => c.prediction.step <= limit);
}

/**
 * One sentence on how many of `ranked` plans are within `band` (relative) of the best and how plans are ordered: the
 * CLI's `order` line and the explorer's.
 */
export function bandLine(equivalent: number, ranked: number, band: number): string {
  const n = (x: number) => x.toLocaleString('en-US');
  const why = band === MODEL_ERROR_BAND ? "the model's largest error on Megatron's Table 1" : 'the band asked for';
  return `${n(equivalent)} of ${n(ranked)} plans are within ${
    (band * 100).toFixed(1)
  }% of the best step time (${why}), ` +
    'marked ≈ best: the model does not tell them apart; ties in step time go to fewer ranks in groups crossing nodes, ' +
    "then less memory per rank, then the plan's fields";
}
