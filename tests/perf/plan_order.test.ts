/** The plan order and the equivalence band (src/perf/plan_order.ts), and that the search and the explorer share them. */
import { deepStrictEqual, equal, ok, throws } from 'node:assert/strict';
import { NetworkModel } from '../../src/comm/network.ts';
import { makePlan, type ParallelPlan } from '../../src/parallel/plan/plan.ts';
import type { Recompute } from '../../src/models/recompute.ts';
import { DEVICE_PROFILES } from '../../src/perf/device_profile.ts';
import { MODEL_PRESETS } from '../../src/perf/model_presets.ts';
import { PAPER_ROWS, predictPaperRow } from '../../src/perf/paper_validation.ts';
import { comparePlans, crossingRanks, MODEL_ERROR_BAND, type Ordered, withinBand } from '../../src/perf/plan_order.ts';
import { searchPlans, shortPlan } from '../../src/perf/plan_search.ts';
import { explorePlans } from '../../src/app/panels/plan_explore.ts';

const cand = (
  step: number,
  crossing: number,
  memory: number,
  over: Partial<ParallelPlan> = {},
  recompute: Recompute = 'none',
): Ordered => ({
  plan: makePlan(over),
  recompute,
  prediction: { step, memory: { total: memory } },
  crossing,
});

/** Every order of `xs` (xs is small). */
const permutations = <T>(xs: T[]): T[][] =>
  xs.length <= 1
    ? [xs]
    : xs.flatMap((x, i) => permutations([...xs.slice(0, i), ...xs.slice(i + 1)]).map((p) => [x, ...p]));

Deno.test('plan order: time, then fewer crossing ranks, then less memory, then the plan fields, whatever the input order', () => {
  const want = [
    cand(1.0, 24, 9e9, { dp: 2 }),
    cand(1.0 + 1e-13, 24, 9e9, { dp: 4 }), // equal time to 9 digits, same crossing and memory: the fields decide (dp 2 < 4)
    cand(1.0, 24, 9e9 + 1, { dp: 1 }), // more memory
    cand(1.0, 40, 1e9, { dp: 1 }), // more ranks crossing nodes outweighs less memory
    cand(1.0, 40, 1e9, { dp: 1 }, 'selective'), // same plan, another recompute mode: 'none' < 'selective'
    cand(1.001, 0, 1e9), // slower loses whatever else it has
  ];
  for (const order of permutations(want.map((_, i) => i))) {
    const got = order.map((i) => want[i]).sort(comparePlans);
    deepStrictEqual(got.map((c) => want.indexOf(c)), want.map((_, i) => i), `input order ${order}`);
  }
  equal(comparePlans(want[0], { ...want[0] }), 0, 'the same plan and recompute mode compare equal');
  ok(comparePlans(want[5], want[0]) > 0 && comparePlans(want[0], want[5]) < 0, 'antisymmetric');
});

Deno.test('crossing ranks: the sizes of the tp, cp, pp and dp groups that span a node, on the mesh order', () => {
  equal(crossingRanks(makePlan({ dp: 16, tp: 8, pp: 8 }), 8), 8 + 16, 'tp 8 in a node; pp and dp leave it');
  equal(crossingRanks(makePlan({ dp: 16, tp: 4, cp: 2, pp: 8 }), 8), 8 + 16, 'tp 4 × cp 2 fill a node');
  equal(crossingRanks(makePlan({ dp: 32, tp: 4, pp: 8 }), 8), 8 + 32, 'pp stride 4: its group spans 28 ranks');
  equal(crossingRanks(makePlan({ dp: 8 }), 8), 0, 'dp 8 on one node');
  equal(crossingRanks(makePlan({ dp: 8 }), 4), 8);
  equal(crossingRanks(makePlan({ tp: 2, dp: 2 }), 1), 4, 'one rank per node: every group of two or more crosses');
  throws(() => crossingRanks(makePlan(), 0), /ranks per node must be a positive integer, got 0/);
});

Deno.test("the band is the model's largest error on Megatron's Table 1; bad bands are refused", () => {
  const errors = PAPER_ROWS.filter((r) => r.source.endsWith('Table 1')).map((r) => Math.abs(predictPaperRow(r).error));
  equal(errors.length, 10);
  ok(
    errors.includes(MODEL_ERROR_BAND) && errors.every((e) => e <= MODEL_ERROR_BAND),
    `${MODEL_ERROR_BAND} vs ${errors}`,
  );
  throws(() => withinBand([], -0.1), /the equivalence band must be a number ≥ 0, got -0\.1/);
  throws(() => withinBand([], NaN), /must be a number ≥ 0, got NaN/);
});

const SMALL = {
  model: MODEL_PRESETS['megatron-1.7b'],
  world: 8,
  dev: DEVICE_PROFILES['a100-80g'],
  net: NetworkModel.parse('pcie-eth'), // 4 ranks per node: some groups of 8 ranks cross
  dtype: 'bf16' as const,
  attention: 'flash' as const,
};

Deno.test('search: ranked by the plan order, ties broken, plans within the band of the best marked and counted', () => {
  const r = searchPlans({ ...SMALL, band: 0.05 });
  equal(r.band, 0.05);
  const best = r.ranked[0].prediction.step;
  let tieBroken = 0;
  r.ranked.forEach((c, i) => {
    equal(c.crossing, crossingRanks(c.plan, 4));
    equal(c.equivalent, c.prediction.step <= best * 1.05, shortPlan(c, SMALL.model));
    if (i) {
      ok(comparePlans(r.ranked[i - 1], c) < 0, `plans ${i} and ${i + 1} in the stated order`);
      if (r.ranked[i - 1].prediction.step.toPrecision(9) === c.prediction.step.toPrecision(9)) tieBroken++;
    }
  });
  ok(tieBroken > 0, 'the small search has ties in step time for the rule to break');
  equal(r.equivalent, r.ranked.filter((c) => c.equivalent).length);
  ok(r.equivalent >= 1 && r.equivalent < r.ranked.length, `${r.equivalent} of ${r.ranked.length} within 5%`);
  ok(r.ranked.slice(0, r.equivalent).every((c) => c.equivalent), 'the equivalent plans come first');
  const none = searchPlans({ ...SMALL, band: 0 });
  ok(none.equivalent >= 1 && none.equivalent < r.equivalent, 'band 0: only plans tied with the best');
  equal(searchPlans(SMALL).band, MODEL_ERROR_BAND, 'the default band');
});

Deno.test('explorer: the same order and the same marks as the search', () => {
  const r = explorePlans({
    model: 'megatron-1.7b',
    world: 8,
    device: 'a100-80g',
    net: 'pcie-eth',
    dtype: 'bf16',
    attention: 'flash',
    band: 0.05,
    top: 40,
  });
  if (!r.ok) throw new Error(r.message);
  const s = searchPlans({ ...SMALL, band: 0.05 });
  const sorted = [...s.ranked].reverse().sort(comparePlans).slice(0, 40);
  deepStrictEqual(r.rows.map((x) => x.label), sorted.map((c) => shortPlan(c, SMALL.model)));
  deepStrictEqual(r.rows.map((x) => x.equivalent), sorted.map((c) => c.equivalent));
  equal(r.equivalent, s.equivalent);
  const n = (x: number) => x.toLocaleString('en-US');
  ok(
    r.order.startsWith(
      `${n(s.equivalent)} of ${n(s.ranked.length)} plans are within 5.0% of the best step time (the band asked for)`,
    ),
    r.order,
  );
});
