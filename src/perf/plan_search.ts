/**
 * The plan search (docs/design.md §29; AxoNN's performance model that chooses the configuration):
 * every valid dp × tp × pp × cp (ring or Ulysses) × ZeRO stage × sequence parallelism ×
 * micro-batch count × pipeline schedule × recompute mode for a world size, the plans that
 * exceed device memory dropped, the rest ranked by predicted step time (step_time.ts). All
 * closed form: one plan costs microseconds, so a 1024-rank search runs in seconds.
 *
 * Not enumerated: expert parallelism (the presets are dense: ep = 1), GPipe (the same bubble
 * as 1F1B with all m micro-batches in flight: never faster, never smaller), compression.
 */
import type { NetworkModel } from '../comm/network.ts';
import { makePlan, type ParallelPlan, type PlanModel, planProblems, rankParams } from '../parallel/plan.ts';
import type { Recompute } from '../models/recompute.ts';
import type { DeviceProfile } from './device_profile.ts';
import { stepMemory, type StepOptions } from './step_memory.ts';
import { predictStep, type StepPrediction } from './step_time.ts';

export interface SearchInput {
  model: PlanModel;
  world: number;
  dev: DeviceProfile;
  net: NetworkModel;
  dtype: StepOptions['dtype'];
  attention: StepOptions['attention'];
}

/** One ranked plan. */
export interface Candidate {
  plan: ParallelPlan;
  recompute: Recompute;
  prediction: StepPrediction;
}

export interface SearchResult {
  /** Every fitting plan, fastest first. */
  ranked: Candidate[];
  /** Plans enumerated, valid by validatePlan's rules, and of those over device memory. */
  enumerated: number;
  valid: number;
  overMemory: number;
  ms: number;
}

const divisors = (n: number) => [...Array(n).keys()].map((i) => i + 1).filter((d) => n % d === 0);
const RECOMPUTE: Recompute[] = ['none', 'selective', 'full'];

/**
 * Enumerates, filters and ranks (see the module doc).
 * @throws Error when the world size is not a positive integer, or when no plan is valid or none
 *   fits, naming why (the rule that rejects most, or the smallest memory found).
 */
export function searchPlans(input: SearchInput): SearchResult {
  const t0 = performance.now(), { model, world, dev } = input;
  if (!Number.isInteger(world) || world < 1) throw new Error(`--world must be a positive integer, got ${world}`);
  const params = rankParams(makePlan(), model, 0).dense;
  const ranked: Candidate[] = [], why = new Map<string, { example: string; count: number }>();
  // Rejections grouped by rule (numbers masked), each with its first concrete message.
  const note = (p: string) => {
    const k = p.replace(/\d+/g, 'N'), had = why.get(k);
    why.set(k, { example: had?.example ?? p, count: (had?.count ?? 0) + 1 });
  };
  let enumerated = 0, valid = 0, overMemory = 0, smallest = Infinity;
  for (const tp of divisors(world)) {
    for (const pp of divisors(world / tp)) {
      for (const cp of divisors(world / (tp * pp))) {
        const dp = world / (tp * pp * cp);
        if (model.batchSize % dp !== 0) {
          enumerated++;
          note(`global batch ${model.batchSize} not divisible by dp ${dp}`);
          continue;
        }
        for (const plan of variants(dp, pp, cp, tp, model)) {
          for (const recompute of RECOMPUTE) {
            enumerated++;
            const problems = planProblems(plan, model, world);
            if (problems.length) {
              problems.forEach(note);
              continue;
            }
            valid++;
            const o = { dtype: input.dtype, recompute, attention: input.attention };
            const mem = stepMemory(plan, model, o).total;
            smallest = Math.min(smallest, mem);
            if (mem > dev.memoryBytes) {
              overMemory++;
              continue;
            }
            ranked.push({ plan, recompute, prediction: predictStep(plan, model, o, dev, input.net, params) });
          }
        }
      }
    }
  }
  if (!valid) {
    const top = [...why.values()].sort((a, b) => b.count - a.count).slice(0, 4).map((x) => x.example);
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
  ranked.sort((a, b) => a.prediction.step - b.prediction.step);
  return { ranked, enumerated, valid, overMemory, ms: performance.now() - t0 };
}

/** The ZeRO × sp × micro-batch × schedule × cp-kind variants of one factorisation (validity unchecked). */
function* variants(dp: number, pp: number, cp: number, tp: number, model: PlanModel): Generator<ParallelPlan> {
  const zeros = dp * cp > 1 ? [0, 1, 2, 3] as const : [0] as const;
  const cpKinds = cp > 1 ? ['ring', 'ulysses'] as const : ['ring'] as const;
  const chunks = divisors(model.nLayer / pp > 0 && model.nLayer % pp === 0 ? model.nLayer / pp : 1)
    .filter((v) => v >= 2 && v <= 8);
  for (const m of divisors(model.batchSize / dp)) {
    const schedules: [ParallelPlan['schedule'], number][] = [['1f1b', 1]];
    if (pp > 1 && m % pp === 0) { for (const v of chunks) schedules.push(['interleaved', v]); }
    for (const zero of zeros) {
      for (const sp of tp > 1 ? [false, true] : [false]) {
        for (const cpKind of cpKinds) {
          for (const [schedule, virtualStages] of schedules) {
            yield makePlan({ dp, pp, cp, tp, zero, sp, microBatches: m, schedule, virtualStages, cpKind });
          }
        }
      }
    }
  }
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
