/**
 * Every rule a parallel plan must keep (docs/design.md#parallel-strategies), as ONE ordered table: each entry says
 * when it applies and returns its message when broken. {@link planProblems} runs the table and {@link checkPlan}
 * throws one Error listing every broken rule; the CLI (`npm run train`, `npm run plan`), the browser's Setup form
 * and the plan search all call them, on the host: ranks receive a checked plan.
 *
 * What a rule sees ({@link PlanFacts}): the plan, and when known the model (PlanModel), the world size, the
 * run's config (its architecture and the knobs that a parallel run refuses) and the caller's maximum world (limits.ts). A rule needing what is not known is
 * skipped, so the same table checks a plan alone (strategy.ts), against a model (the plan search) or for a run.
 * The shape rules come first: when one fails (a degree that is not a positive integer, an unknown schedule) the
 * others, which assume sane numbers, are skipped.
 */
import type { ParallelPlan } from './plan_type.ts';
import type { PlanModel } from './plan.ts';
import { PLAN_RULES } from './rule_table.ts';

/** What a rule reads of the run's config: its architecture and the knobs a parallel run refuses. */
export interface RunFacts {
  arch: string;
  precision?: string;
  topkAttention?: number;
  goldfishK?: number;
  neftuneAlpha?: number;
  /** recurrent-depth: prelude and coda blocks (models/archs.ts pipelineBlocks). */
  preludeLayers?: number;
  codaLayers?: number;
  nLayer?: number;
}

/** What the table checks: the plan and what is known around it. */
export interface PlanFacts {
  plan: ParallelPlan;
  model?: PlanModel;
  worldSize?: number;
  run?: RunFacts;
  /**
   * The most ranks the caller handles (limits.ts: MAX_RUN_WORLD for a real run, MAX_PLAN_WORLD for a prediction,
   * MAX_SEARCH_WORLD for a plan search); the limit rules apply only when it is given.
   */
  maxWorld?: number;
}

/** One rule: `check` returns its message when `plan` breaks it, else null. */
export interface PlanRule {
  id: string;
  /**
   * shape rules gate the rest; limit rules are what planFromOptions reads of flags before any model is built; arch
   * rules are what strategy.ts reads without a model.
   */
  group: 'shape' | 'limit' | 'arch' | 'plan' | 'run';
  needs?: 'model' | 'run' | 'worldSize' | 'maxWorld';
  applies?(f: PlanFacts): boolean;
  check(f: Required<PlanFacts>): string | null;
}

/** `facts` with what `rule` needs known, or null when it is not (the rule is skipped). */
function ready(rule: PlanRule, f: PlanFacts): Required<PlanFacts> | null {
  if (rule.needs && f[rule.needs] === undefined) return null;
  if (rule.applies && !rule.applies(f)) return null;
  return f as Required<PlanFacts>;
}

/** The messages of the rules of `groups` (all when absent) that `facts` break, in table order. */
function broken(facts: PlanFacts, groups?: readonly PlanRule['group'][]): string[] {
  const out: string[] = [];
  let gated = false;
  for (const rule of PLAN_RULES) {
    if (groups && !groups.includes(rule.group)) continue;
    if (gated && rule.group !== 'shape') break; // the rules below assume sane numbers
    const f = ready(rule, facts), msg = f && rule.check(f);
    if (msg) {
      out.push(msg);
      if (rule.group === 'shape') gated = true;
    }
  }
  return out;
}

/**
 * Every rule of the table `plan` breaks, in words: against `model` when given, on `worldSize` ranks when given,
 * for a run of `run` (its architecture and config) when given, and within the caller's `maxWorld` ranks (and
 * pipeline slots) when given. The Setup form and the plan search show these.
 */
export function planProblems(
  plan: ParallelPlan,
  model?: PlanModel,
  worldSize?: number,
  run?: RunFacts,
  maxWorld?: number,
): string[] {
  return broken({ plan, model, worldSize, run, maxWorld });
}

/**
 * Checks `plan` against every rule of the table before anything starts (see {@link planProblems}).
 * @returns `plan`, unchanged.
 * @throws one Error listing every broken rule, e.g. "invalid parallel plan: nEmbd 64 is not divisible by tp 3;
 *   heads 4 not divisible by tp 3".
 */
export function checkPlan(
  plan: ParallelPlan,
  model?: PlanModel,
  worldSize?: number,
  run?: RunFacts,
  maxWorld?: number,
): ParallelPlan {
  const problems = planProblems(plan, model, worldSize, run, maxWorld);
  if (problems.length) throw new Error(`invalid parallel plan: ${problems.join('; ')}`);
  return plan;
}

/**
 * The table's limit rules alone (limits.ts), for a plan just built from flags (plan_schema.ts planFromOptions):
 * what must be refused before a model is built or anything is allocated.
 */
export const limitProblems = (plan: ParallelPlan, maxWorld: number): string[] => broken({ plan, maxWorld }, ['limit']);

/** The table's architecture rules alone (strategy.ts), for a plan whose model is not built yet. */
export const archRuleProblems = (plan: ParallelPlan, arch: string): string[] =>
  broken({ plan, run: { arch } }, ['arch']);
