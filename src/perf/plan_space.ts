/**
 * The plans the search (plan_search.ts, docs/design.md#a-performance-model-that-chooses-the-plan) enumerates, counted
 * before any is priced: every dp × tp × pp × cp split of the world, and within a split every micro-batch count m
 * dividing the global batch over dp, ZeRO stage, sequence parallelism, cp kind, schedule and recompute mode. A split
 * that breaks a shape rule (tp must divide heads and hidden, pp the layers, cp the sequence, dp the global batch)
 * breaks it for every variant, so its variants are counted and its rules noted by multiplication rather than one by
 * one: the work is the plans that are valid, and those are bounded by {@link MAX_PRICED_PLANS} (micro-batch counts are
 * thinned, and the result says so, when a batch with many divisors on many ranks would exceed it).
 */
import { makePlan, type ParallelPlan, type PlanModel, planProblems } from '../parallel/plan/plan.ts';
import type { Recompute } from '../models/recompute.ts';
import { MAX_SEARCH_WORLD } from '../parallel/plan/limits.ts';

/** Recompute modes priced per plan. */
export const RECOMPUTE: readonly Recompute[] = ['none', 'selective', 'full'];

/**
 * Most valid plans one search prices (memory, and step time where it fits). About twice the
 * 175B preset's 268 260 on 1024 ranks, so the presets at their own batch are never thinned.
 */
export const MAX_PRICED_PLANS = 600_000;

/** Largest global batch the search takes (`--global-batch`, a model's `batch=`): its divisors are the micro-batch counts. */
export const MAX_SEARCH_BATCH = 1 << 24;

/** Divisors of a positive integer `n`, ascending, by trial division up to √n. */
export function divisors(n: number): number[] {
  const low: number[] = [], high: number[] = [];
  for (let d = 1; d * d <= n; d++) {
    if (n % d !== 0) continue;
    low.push(d);
    if (d * d !== n) high.push(n / d);
  }
  return low.concat(high.reverse());
}

/** One dp × pp × cp × tp split whose shape rules hold for at least one sp / cp-kind choice. */
export interface Split {
  dp: number;
  pp: number;
  cp: number;
  tp: number;
  /** Micro-batch counts priced (all divisors of batch / dp, or a thinned subset), ascending. */
  microBatches: number[];
  /** Interleaved chunk counts v (2 … 8, dividing the stage's layers). */
  chunks: number[];
  /** The (sp, cp kind) choices whose rules hold, in enumeration order. */
  kinds: { sp: boolean; cpKind: ParallelPlan['cpKind'] }[];
}

export interface PlanSpace {
  splits: Split[];
  /** Every plan of every split, valid or not (as if each were built). */
  enumerated: number;
  /** Of those, the plans that break no rule. */
  valid: number;
  /** The valid plans of `splits` (equal to `valid` unless thinned). */
  priced: number;
  /** Broken rules with numbers masked: the first message and how many plans broke it. */
  rejections: Map<string, { example: string; count: number }>;
  /** Set when micro-batch counts were thinned to bound the work: at most `kept` per split, of up to `most`. */
  thinned?: { kept: number; most: number };
}

const zerosOf = (dp: number, cp: number) => (dp * cp > 1 ? [0, 1, 2, 3] as const : [0] as const);

/** Schedules one micro-batch count takes: 1F1B, and interleaved with each v when pp divides m. */
const schedulesOf = (m: number, pp: number, chunks: number[]) => 1 + (pp > 1 && m % pp === 0 ? chunks.length : 0);

/** Plans of one (sp, cp kind) choice of a split over micro-batch counts `ms`, recompute modes included. */
const variantCount = (dp: number, pp: number, cp: number, ms: number[], chunks: number[]) =>
  ms.reduce((n, m) => n + zerosOf(dp, cp).length * schedulesOf(m, pp, chunks) * RECOMPUTE.length, 0);

/** `kept` of `xs` spread evenly by position, the first and the last included. */
function spread(xs: number[], kept: number): number[] {
  if (xs.length <= kept) return xs;
  if (kept === 1) return [xs[0]];
  return [...new Set(Array.from({ length: kept }, (_, i) => xs[Math.round((i * (xs.length - 1)) / (kept - 1))]))];
}

/**
 * The plan space of `model` on `world` ranks (see the module doc), micro-batch counts thinned
 * when the valid plans exceed `budget`.
 * @throws Error when the global batch exceeds {@link MAX_SEARCH_BATCH}, or when even one
 *   micro-batch count per split exceeds `budget`, naming the bound.
 */
export function planSpace(model: PlanModel, world: number, budget = MAX_PRICED_PLANS): PlanSpace {
  if (!(model.batchSize <= MAX_SEARCH_BATCH)) {
    throw new Error(`global batch ${model.batchSize} exceeds the search's maximum ${MAX_SEARCH_BATCH}`);
  }
  const rejections = new Map<string, { example: string; count: number }>();
  const note = (p: string, times: number) => {
    const k = p.replace(/\d+/g, 'N'), had = rejections.get(k);
    rejections.set(k, { example: had?.example ?? p, count: (had?.count ?? 0) + times });
  };
  // The plan's rules (one table, src/parallel/plan/rules.ts) with the architecture the model's layout names.
  const run = { arch: model.layout?.arch ?? 'gpt' };
  const batchDivisors = divisors(model.batchSize);
  const splits: Split[] = [];
  let enumerated = 0, valid = 0;
  for (const tp of divisors(world)) {
    for (const pp of divisors(world / tp)) {
      for (const cp of divisors(world / (tp * pp))) {
        const dp = world / (tp * pp * cp);
        if (model.batchSize % dp !== 0) {
          enumerated++;
          note(`global batch ${model.batchSize} not divisible by dp ${dp}`, 1);
          continue;
        }
        const perDp = model.batchSize / dp, ms = batchDivisors.filter((m) => perDp % m === 0);
        const stage = model.nLayer % pp === 0 ? model.nLayer / pp : 1;
        const chunks = [2, 3, 4, 5, 6, 7, 8].filter((v) => stage % v === 0);
        const each = variantCount(dp, pp, cp, ms, chunks), kinds: Split['kinds'] = [];
        for (const sp of tp > 1 ? [false, true] : [false]) {
          for (const cpKind of cp > 1 ? ['ring', 'ulysses'] as const : ['ring'] as const) {
            enumerated += each;
            const problems = planProblems(
              makePlan({ dp, pp, cp, tp, sp, cpKind }),
              model,
              world,
              run,
              MAX_SEARCH_WORLD,
            );
            if (problems.length) problems.forEach((p) => note(p, each));
            else kinds.push({ sp, cpKind });
          }
        }
        valid += kinds.length * each;
        if (kinds.length) splits.push({ dp, pp, cp, tp, microBatches: ms, chunks, kinds });
      }
    }
  }
  const pricedWith = (kept: number) =>
    splits.reduce(
      (n, s) => n + s.kinds.length * variantCount(s.dp, s.pp, s.cp, spread(s.microBatches, kept), s.chunks),
      0,
    );
  if (valid <= budget) return { splits, enumerated, valid, priced: valid, rejections };
  // The largest count per split that fits (the count grows with it, though not strictly: which m are
  // kept decides how many interleaved schedules they bring, hence the final walk down).
  const most = Math.max(...splits.map((s) => s.microBatches.length));
  let lo = 0, hi = most - 1;
  while (lo < hi) {
    const mid = Math.ceil((lo + hi) / 2);
    if (pricedWith(mid) <= budget) lo = mid;
    else hi = mid - 1;
  }
  let kept = lo;
  while (kept >= 1 && pricedWith(kept) > budget) kept--;
  if (kept < 1) {
    throw new Error(
      `the search would price ${
        pricedWith(1).toLocaleString('en-US')
      } plans on ${world} ranks even with one micro-batch count per split, over its bound of ${
        budget.toLocaleString('en-US')
      }: give fewer ranks, or a model whose dimensions leave fewer valid splits`,
    );
  }
  const thinnedSplits = splits.map((s) => ({ ...s, microBatches: spread(s.microBatches, kept) }));
  return { splits: thinnedSplits, enumerated, valid, priced: pricedWith(kept), rejections, thinned: { kept, most } };
}

/** Every plan of a split, in the search's order (micro-batches, ZeRO, sp, cp kind, schedule). */
export function* splitPlans(s: Split): Generator<ParallelPlan> {
  const { dp, pp, cp, tp } = s;
  for (const m of s.microBatches) {
    const schedules: [ParallelPlan['schedule'], number][] = [['1f1b', 1]];
    if (pp > 1 && m % pp === 0) { for (const v of s.chunks) schedules.push(['interleaved', v]); }
    for (const zero of zerosOf(dp, cp)) {
      for (const { sp, cpKind } of s.kinds) {
        for (const [schedule, virtualStages] of schedules) {
          yield makePlan({ dp, pp, cp, tp, zero, sp, microBatches: m, schedule, virtualStages, cpKind });
        }
      }
    }
  }
}
