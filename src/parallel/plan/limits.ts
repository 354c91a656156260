/**
 * How much a plan may ask of what runs or predicts it, as rules of the plan's one table (rule_table.ts runs them
 * after the shape rules): the world size a real run, a prediction or a plan search handles, and the cells of the
 * simulated pipeline schedule. They apply where the caller names its maximum world (rules.ts PlanFacts.maxWorld):
 * a plan made in code for an analytic table (paper_validation.ts) is bound by neither.
 */
import type { PlanRule } from './rules.ts';
import { planWorldSize } from './plan_type.ts';

/** Ranks of a real run (one worker and WebGPU device each). */
export const MAX_RUN_WORLD = 64;
/**
 * Ranks `npm run plan` predicts analytically. Its per-rank tables cost O(world²) (every rank's
 * groups are listed): 4096 ranks take ≈ 16 s on a 2-core machine.
 */
export const MAX_PLAN_WORLD = 4096;
/** Ranks `npm run plan -- --search` enumerates plans for (closed form: no per-rank tables). */
export const MAX_SEARCH_WORLD = 65_536;
/** pp × virtualStages × micro-batches: the cells of the simulated pipeline schedule (≈ 3 s at the bound). */
export const MAX_PIPELINE_SLOTS = 131_072;

/** What a world of at most `maxWorld` ranks is, for the message. */
const purpose = (maxWorld: number) =>
  maxWorld === MAX_RUN_WORLD
    ? `a real run (npm run plan predicts up to ${MAX_PLAN_WORLD})`
    : maxWorld === MAX_SEARCH_WORLD
    ? 'a plan search'
    : 'a prediction';

/** The limit rules, in the table's order. Their messages name the CLI's flags (the Setup form renames them). */
export const LIMIT_RULES: PlanRule[] = [
  {
    id: 'world-max',
    group: 'limit',
    needs: 'maxWorld',
    check: ({ plan: p, maxWorld: max }) => {
      const world = planWorldSize(p);
      return world <= max
        ? null
        : `world size --dp·--pp·--cp·--tp = ${p.dp}·${p.pp}·${p.cp}·${p.tp} = ${world} exceeds the maximum ${max} ranks of ${
          purpose(max)
        }`;
    },
  },
  {
    id: 'pipeline-slots',
    group: 'limit',
    needs: 'maxWorld',
    check: ({ plan: { pp, virtualStages: v, microBatches: m } }) =>
      pp * v * m <= MAX_PIPELINE_SLOTS
        ? null
        : `--pp × --virtual-stages × --micro-batches = ${pp} × ${v} × ${m} = ${
          pp * v * m
        } exceeds the maximum ${MAX_PIPELINE_SLOTS} pipeline slots (micro-batches default to --grad-accum)`,
  },
];
