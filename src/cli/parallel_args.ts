/**
 * A parallel run's typed options (an experiment's `trainParallel`, src/experiments/common.ts
 * ParallelRunOptions) as the parsed flags train_parallel.ts runs: the same run `npm run train`
 * makes of those flags over the tiny preset.
 */
import type { ParsedTrainArgs } from './args.ts';
import { kebab } from './flags.ts';
import { type PlanOptions, PlanSchema } from '../parallel/plan/plan_schema.ts';
import type { ParallelRunOptions } from '../experiments/common.ts';
import { issueText } from '../util/issue_text.ts';

/** `{ dp: 2, sync: 'diloco', sp: true }` → `--dp 2 --sync diloco --sp true`: what a printed resume command repeats. */
export function planFlags(plan: Partial<PlanOptions>): string[] {
  return Object.entries(plan).flatMap(([k, v]) => (v === undefined ? [] : [`--${kebab(k)}`, String(v)]));
}

/**
 * The parsed flags of `o` (config values are checked by the run's parseConfig), and the plan's
 * flags for the commands the run prints.
 * @throws Error naming a plan key PlanSchema does not have or a value it refuses, or a GPU other
 *   than auto, wgpu or dawn.
 */
export function parallelArgs(o: ParallelRunOptions): { argv: string[]; args: ParsedTrainArgs } {
  const allowed = Object.keys(PlanSchema.shape);
  const unknown = Object.keys(o.plan).filter((k) => !allowed.includes(k));
  if (unknown.length) {
    throw new Error(`trainParallel: unknown plan key ${unknown.join(', ')}; allowed: ${allowed.join(', ')}`);
  }
  const checked = PlanSchema.safeParse(o.plan);
  if (!checked.success) {
    const issue = checked.error.issues[0], key = String(issue.path[0]);
    throw new Error(`trainParallel: ${issueText(key, (o.plan as Record<string, unknown>)[key], issue)}`);
  }
  const gpu = o.gpu ?? 'auto';
  if (!['auto', 'wgpu', 'dawn'].includes(gpu)) {
    throw new Error(`trainParallel: gpu must be one of auto, wgpu, dawn, got '${gpu}'`);
  }
  const args: ParsedTrainArgs = {
    overrides: { ...o.config },
    preset: 'tiny',
    gpu,
    out: o.out,
    resume: false,
    allowLegacyCheckpoint: false,
    help: false,
    extra: {},
    options: { ...o.plan },
  };
  return { argv: planFlags(o.plan), args };
}
