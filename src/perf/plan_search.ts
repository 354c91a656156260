/**
 * The plan search (docs/design.md#a-performance-model-that-chooses-the-plan; AxoNN's performance model that chooses the
 * configuration): every valid dp × tp × pp × cp (ring or Ulysses) × ZeRO stage × sequence parallelism × micro-batch
 * count × pipeline schedule × recompute mode for a world size, the plans that exceed device memory dropped, the rest
 * ranked by predicted step time (step_time.ts) with ties broken, and the plans within the model's error band of the best
 * marked equivalent, by plan_order.ts. All closed form: one plan costs microseconds, so a 1024-rank search
 * runs in seconds. Which plans are enumerated, and the bound on how many are priced, is plan_space.ts's.
 *
 * Not enumerated: expert parallelism (the presets are dense: ep = 1), GPipe (the same bubble
 * as 1F1B with all m micro-batches in flight: never faster, never smaller), compression.
 */
import type { NetworkModel } from '../comm/network.ts';
import { makePlan, type ParallelPlan, type PlanModel, rankParams } from '../parallel/plan/plan.ts';
import type { Recompute } from '../models/recompute.ts';
import { type PlanSpace, planSpace, RECOMPUTE, splitPlans } from './plan_space.ts';
import type { DeviceProfile } from './device_profile.ts';
import { stepMemory, type StepOptions } from './step_memory.ts';
import { predictStep, type StepPrediction } from './step_time.ts';
import { comparePlans, crossingRanks, MODEL_ERROR_BAND, withinBand } from './plan_order.ts';

export interface SearchInput {
  model: PlanModel;
  world: number;
  dev: DeviceProfile;
  net: NetworkModel;
  dtype: StepOptions['dtype'];
  attention: StepOptions['attention'];
  /** Equivalence band relative to the best step time (plan_order.ts); absent: MODEL_ERROR_BAND. */
  band?: number;
}

/** One ranked plan. */
export interface Candidate {
  plan: ParallelPlan;
  recompute: Recompute;
  prediction: StepPrediction;
  /** Ranks in the plan's groups that cross a node on the search's network (plan_order.ts crossingRanks). */
  crossing: number;
  /** Within the equivalence band of the best plan (plan_order.ts withinBand). */
  equivalent: boolean;
}

export interface SearchResult {
  /** Every fitting plan, in plan_order.ts's order (fastest first). */
  ranked: Candidate[];
  /** The equivalence band used (relative), and how many ranked plans are within it of the best. */
  band: number;
  equivalent: number;
  /** Plans enumerated, valid by the plan's rules (plan/rules.ts), and of those over device memory. */
  enumerated: number;
  valid: number;
  overMemory: number;
  /** Valid plans priced (memory, and step time where they fit): `valid` unless thinned, never above MAX_PRICED_PLANS. */
  priced: number;
  /** Set when micro-batch counts were thinned to bound the work (plan_space.ts). */
  thinned?: PlanSpace['thinned'];
  ms: number;
}

/**
 * Enumerates, filters and ranks (see the module doc); at most plan_space.ts's MAX_PRICED_PLANS plans are priced.
 * @throws Error when the world size is not a positive integer, the band negative, when no plan is valid or none
 *   fits, naming why (the rule that rejects most, or the smallest memory found), or when the
 *   split count alone exceeds the bound (planSpace).
 */
export function searchPlans(input: SearchInput): SearchResult {
  const t0 = performance.now(), { model, world, dev } = input;
  if (!Number.isInteger(world) || world < 1) throw new Error(`--world must be a positive integer, got ${world}`);
  const band = input.band ?? MODEL_ERROR_BAND, node = input.net.spec.ranksPerNode;
  withinBand([], band); // a bad band fails before the work
  const params = rankParams(makePlan(), model, 0).dense;
  const space = planSpace(model, world);
  const ranked: Candidate[] = [];
  let overMemory = 0, smallest = Infinity;
  for (const split of space.splits) {
    for (const plan of splitPlans(split)) {
      for (const recompute of RECOMPUTE) {
        const o = { dtype: input.dtype, recompute, attention: input.attention };
        const mem = stepMemory(plan, model, o).total;
        smallest = Math.min(smallest, mem);
        if (mem > dev.memoryBytes) {
          overMemory++;
          continue;
        }
        const prediction = predictStep(plan, model, o, dev, input.net, params);
        ranked.push({ plan, recompute, prediction, crossing: crossingRanks(plan, node), equivalent: false });
      }
    }
  }
  if (!space.valid) {
    const top = [...space.rejections.values()].sort((a, b) => b.count - a.count).slice(0, 4).map((x) => x.example);
    throw new Error(
      `no valid plan on ${world} ranks: every split dp·tp·pp·cp = ${world} breaks a rule, e.g. ${
        top.join('; ')
      } (tp must divide heads and hidden, pp the layers, cp the sequence, dp the global batch)`,
    );
  }
  if (!ranked.length) {
    throw new Error(
      `no plan fits ${dev.name}'s ${(dev.memoryBytes / 2 ** 30).toFixed(0)} GiB on ${world} ranks: the smallest needs ${
        (smallest / 2 ** 30).toFixed(1)
      } GiB per rank; use more ranks or a larger device`,
    );
  }
  ranked.sort(comparePlans);
  let equivalent = 0;
  withinBand(ranked, band).forEach((inside, i) => {
    ranked[i].equivalent = inside;
    if (inside) equivalent++;
  });
  const { enumerated, valid, priced, thinned } = space;
  return { ranked, band, equivalent, enumerated, valid, overMemory, priced, thinned, ms: performance.now() - t0 };
}

/** `dp 8 · tp 8 · pp 16 · zero 1 · sp · 1f1b m 192 (b 1) · full` — a plan in one short line. */
export function shortPlan(c: Candidate, model: PlanModel): string {
  const p = c.plan, b = model.batchSize / (p.dp * p.microBatches);
  return [
    `dp ${p.dp}`,
    `tp ${p.tp}${p.sp ? '+sp' : ''}`,
    `pp ${p.pp}`,
    ...(p.cp > 1 ? [`cp ${p.cp} ${p.cpKind}`] : []),
    `zero ${p.zero}`,
    `${p.schedule === 'interleaved' ? `interleaved v${p.virtualStages}` : p.schedule} m ${p.microBatches} (b ${b})`,
    `recompute ${c.recompute}`,
  ].join(' · ');
}

/**
 * One line on why the best plan wins: against the fastest plan with another model-parallel shape
 * (tp × pp; dp and cp only trade sequences between ranks and often tie), the two step components
 * (compute, bubble, exposed communication per dimension, optimizer) that differ most, in seconds.
 */
export function whyBest(r: SearchResult, model: PlanModel): string {
  const [best] = r.ranked, shape = (c: Candidate) => `${c.plan.tp}/${c.plan.pp}`;
  const other = r.ranked.find((c) => shape(c) !== shape(best));
  const parts = (c: Candidate) => {
    const x = c.prediction;
    return {
      compute: x.compute,
      bubble: x.bubble,
      'exposed dp': x.exposed.dp,
      'exposed tp': x.exposed.tp,
      'exposed pp': x.exposed.pp,
      'exposed cp': x.exposed.cp,
      optimizer: x.optimizer,
    } as Record<string, number>;
  };
  if (!other) return `why: ${shortPlan(best, model)} is the only tp × pp shape that fits`;
  const a = parts(best), b = parts(other);
  const diffs = Object.keys(a).map((k) => [k, b[k] - a[k]] as const).sort((x, y) => Math.abs(y[1]) - Math.abs(x[1]));
  const ahead = other.prediction.step - best.prediction.step;
  const said = diffs.slice(0, 2).map(([k, d]) =>
    `${k} ${d >= 0 ? `${d.toFixed(2)} s less` : `${(-d).toFixed(2)} s more`}`
  );
  return `why: ${ahead.toFixed(3)} s (${
    (100 * ahead / other.prediction.step).toFixed(2)
  }%) faster than the best plan with another tp × pp (${shortPlan(other, model)}): ${
    said.join(', ')
  }; ${r.overMemory} plans over memory were dropped`;
}
