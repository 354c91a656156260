/**
 * The process groups the MPI world splits at setup for a plan (src/parallel/plan/plan_groups.ts,
 * docs/design.md#process-groups-are-mpi_comm_split-communicators). A collective on a group that was not split is
 * refused under MPI's own collectives, so the families must hold every group a run calls a collective on: each plan
 * below trains 2 steps with a validation pass on local ranks (tests/parallel/trace_harness.ts), and every group id in
 * its trace's collective spans must be a split group holding the same ranks. Plus the families' shape for one mesh, and
 * the refusals of groups.ts checkFamilies.
 */
import { deepStrictEqual, equal, ok, throws } from 'node:assert/strict';
import { checkFamilies, family } from '../../src/comm/groups.ts';
import { makePlan, type ParallelPlan, planWorldSize } from '../../src/parallel/plan/plan.ts';
import { planGroupFamilies } from '../../src/parallel/plan/plan_groups.ts';
import { syncSpecOf } from '../../src/parallel/data/low_comm.ts';
import type { TrainConfig } from '../../src/train/config.ts';
import { TEST, tracedRun } from './trace_harness.ts';

/** Every split group of `plan` by id (the world's own family included, as mpiWorld splits it). */
function splitIds(plan: ParallelPlan): Map<string, number[]> {
  const families = planGroupFamilies(plan);
  checkFamilies(families, planWorldSize(plan));
  const ids = new Map([['world', [...Array(planWorldSize(plan)).keys()]]]);
  for (const f of families) for (const g of f.groups) ids.set(g.id, g.ranks);
  return ids;
}

const PLANS: [string, Partial<ParallelPlan>, Partial<TrainConfig>][] = [
  ['dp 2 · zero 1', { dp: 2, zero: 1 }, {}],
  ['dp 2 · zero 3', { dp: 2, zero: 3 }, {}],
  ['tp 2 · sp', { tp: 2, sp: true }, {}],
  ['dp 2 × pp 2', { dp: 2, pp: 2, microBatches: 2 }, {}],
  ['dp 2 × cp 2', { dp: 2, cp: 2 }, {}],
  ['dp 2 · ep 2', { dp: 2, ep: 2 }, { arch: 'gpt-moe', nExpert: 4 }],
  ['dp 4 · ep 2 · zero 3', { dp: 4, ep: 2, zero: 3 }, { arch: 'gpt-moe', nExpert: 4 }],
  [
    'dp 2 · streaming DiLoCo',
    { dp: 2, sync: syncSpecOf({ sync: 'streaming-diloco', innerSteps: 4, fragments: 2 }) },
    { steps: 4 },
  ],
];

for (const [name, over, cfg] of PLANS) {
  Deno.test({
    name: `plan groups, ${name}: every group a run calls a collective on is split, over the same ranks`,
    ...TEST,
    fn: async () => {
      const plan = makePlan(over), ids = splitIds(plan);
      const { trace } = await tracedRun(plan, cfg);
      const used = new Set(
        trace.traceEvents.filter((e) => e.cat === 'collective').map((e) => e.args!.group as string),
      );
      ok(used.size > 1, `the run called collectives on ${[...used]}`);
      deepStrictEqual([...used].filter((id) => !ids.has(id)), [], 'groups with collectives but no split');
      for (const id of used) {
        // The id names its ranks (dim[r0,r1,…]); the world lanes hold every rank.
        const named = id.match(/\[([\d,]+)\]/)?.[1].split(',').map(Number) ?? ids.get('world');
        deepStrictEqual(ids.get(id), named, id);
      }
    },
  });
}

Deno.test('plan groups of dp 2 × pp 2 × tp 2: one family per mesh dimension and lane, disjoint, in group-rank order', () => {
  const families = planGroupFamilies(makePlan({ dp: 2, pp: 2, tp: 2 }));
  const byName = new Map(families.map((f) => [f.name, f.groups.map((g) => g.id)]));
  deepStrictEqual(byName.get('tp'), ['tp[0,1]', 'tp[2,3]', 'tp[4,5]', 'tp[6,7]']);
  deepStrictEqual(byName.get('pp/eval'), ['pp[0,2]/eval', 'pp[1,3]/eval', 'pp[4,6]/eval', 'pp[5,7]/eval']);
  deepStrictEqual(byName.get('dp/grads'), ['dp[0,4]/grads', 'dp[1,5]/grads', 'dp[2,6]/grads', 'dp[3,7]/grads']);
  deepStrictEqual(byName.get('embedding'), ['embedding[0,2]', 'embedding[1,3]', 'embedding[4,6]', 'embedding[5,7]']);
  equal(
    byName.has('cp/attn'),
    true,
    'size-1 dimensions are split too: a collective on them still needs a communicator',
  );
  equal(byName.has('ep'), false);
  equal(new Set(families.map((f) => f.name)).size, families.length, 'one split per family');
});

Deno.test('group families: overlapping groups, ranks outside the world, empty groups and repeated ids are refused', () => {
  throws(
    () => checkFamilies([family('x', [[0, 1], [1, 2]])], 4),
    /family 'x': rank 1 is in two of its groups.*disjoint/,
  );
  throws(() => checkFamilies([family('x', [[0, 4]])], 4), /rank 4 of 'x\[0,4\]' is outside the world 0…3/);
  throws(() => checkFamilies([{ name: 'x', groups: [{ id: 'e', ranks: [] }] }], 4), /group 'e' has no ranks/);
  throws(() => checkFamilies([family('x', [[0]]), family('x', [[0]])], 4), /group id 'x\[0\]' is split twice/);
  checkFamilies([family('x', [[3, 0]]), family('y', [[0, 1], [2, 3]])], 4); // a rank may sit out a family
});
