/**
 * The plan space of the search: divisors by trial division, the same plans, counts and ranking as
 * building and checking every plan one by one (the search before its work was bounded), and
 * the thinning that bounds the plans priced.
 */
import { deepStrictEqual, equal, ok, throws } from 'node:assert/strict';
import { NetworkModel } from '../../src/comm/network.ts';
import { makePlan, type ParallelPlan, type PlanModel, planProblems } from '../../src/parallel/plan/plan.ts';
import { DEVICE_PROFILES } from '../../src/perf/device_profile.ts';
import { MODEL_PRESETS, parseModel } from '../../src/perf/model_presets.ts';
import { searchPlans } from '../../src/perf/plan_search.ts';
import { divisors, MAX_PRICED_PLANS, planSpace, RECOMPUTE, splitPlans } from '../../src/perf/plan_space.ts';
import { stepMemory } from '../../src/perf/step_memory.ts';

Deno.test('divisors: trial division to √n gives every divisor in order', () => {
  for (let n = 1; n <= 400; n++) {
    deepStrictEqual(divisors(n), [...Array(n).keys()].map((i) => i + 1).filter((d) => n % d === 0), `n = ${n}`);
  }
  equal(divisors(1 << 24).length, 25);
  equal(divisors(14_414_400).length, 504);
});

/** Every plan of every split built and checked one at a time, in the search's order: what the bounded enumeration must equal. */
function bruteForce(model: PlanModel, world: number) {
  const all = (n: number) => [...Array(n).keys()].map((i) => i + 1).filter((d) => n % d === 0);
  const plans: { plan: ParallelPlan; valid: boolean }[] = [];
  let enumerated = 0;
  for (const tp of all(world)) {
    for (const pp of all(world / tp)) {
      for (const cp of all(world / (tp * pp))) {
        const dp = world / (tp * pp * cp);
        if (model.batchSize % dp !== 0) {
          enumerated++;
          continue;
        }
        const chunks = all(model.nLayer % pp === 0 ? model.nLayer / pp : 1).filter((v) => v >= 2 && v <= 8);
        for (const m of all(model.batchSize / dp)) {
          const schedules: [ParallelPlan['schedule'], number][] = [['1f1b', 1]];
          if (pp > 1 && m % pp === 0) { for (const v of chunks) schedules.push(['interleaved', v]); }
          for (const zero of dp * cp > 1 ? [0, 1, 2, 3] as const : [0] as const) {
            for (const sp of tp > 1 ? [false, true] : [false]) {
              for (const cpKind of cp > 1 ? ['ring', 'ulysses'] as const : ['ring'] as const) {
                for (const [schedule, virtualStages] of schedules) {
                  const plan = makePlan({ dp, pp, cp, tp, zero, sp, microBatches: m, schedule, virtualStages, cpKind });
                  enumerated += RECOMPUTE.length;
                  plans.push({ plan, valid: planProblems(plan, model, world).length === 0 });
                }
              }
            }
          }
        }
      }
    }
  }
  return { plans, enumerated };
}

const net = NetworkModel.parse('nvlink-ib');

Deno.test('plan space: the same plans, counts and ranking as checking every plan one by one', () => {
  const cases: [PlanModel, number][] = [
    [MODEL_PRESETS['megatron-1.7b'], 64],
    [{ ...MODEL_PRESETS['megatron-39b'], batchSize: 240 }, 48],
    [parseModel('layers=6,heads=12,hidden=768,seq=1024,vocab=50257,batch=360'), 12],
  ];
  for (const [model, world] of cases) {
    const space = planSpace(model, world), brute = bruteForce(model, world);
    const valid = brute.plans.filter((p) => p.valid).map((p) => JSON.stringify(p.plan));
    equal(space.enumerated, brute.enumerated, `${world} ranks: enumerated`);
    equal(space.valid, valid.length * RECOMPUTE.length, `${world} ranks: valid`);
    equal(space.thinned, undefined);
    deepStrictEqual(space.splits.flatMap((s) => [...splitPlans(s)]).map((p) => JSON.stringify(p)), valid);
    // Ranked as before: the valid plans that fit, by step time, ties in enumeration order.
    const o = { dtype: 'bf16' as const, attention: 'flash' as const }, dev = DEVICE_PROFILES['a100-80g'];
    const r = searchPlans({ model, world, dev, net, ...o });
    const fits = brute.plans.filter((p) => p.valid).flatMap((p) =>
      RECOMPUTE.filter((recompute) => stepMemory(p.plan, model, { ...o, recompute }).total <= dev.memoryBytes).map((
        recompute,
      ) => `${JSON.stringify(p.plan)} ${recompute}`)
    );
    equal(r.ranked.length, fits.length);
    deepStrictEqual(new Set(r.ranked.map((c) => `${JSON.stringify(c.plan)} ${c.recompute}`)), new Set(fits));
    equal(r.overMemory, r.valid - fits.length);
  }
});

Deno.test('plan space: a batch with many divisors on many ranks is thinned to the bound, and says so', () => {
  const model = { ...MODEL_PRESETS['megatron-1t'], batchSize: 8_648_640 }; // 448 divisors
  const full = planSpace(model, 4096, Infinity), space = planSpace(model, 4096);
  ok(full.valid > MAX_PRICED_PLANS && full.thinned === undefined, `${full.valid} valid plans`);
  equal(space.valid, full.valid);
  equal(space.enumerated, full.enumerated);
  ok(space.thinned && space.priced <= MAX_PRICED_PLANS && space.priced > MAX_PRICED_PLANS / 2, `${space.priced}`);
  const byShape = new Map(full.splits.map((s) => [`${s.dp} ${s.pp} ${s.cp} ${s.tp}`, s.microBatches]));
  for (const s of space.splits) {
    const ms = byShape.get(`${s.dp} ${s.pp} ${s.cp} ${s.tp}`)!;
    ok(s.microBatches.length <= space.thinned!.kept);
    // Spread from one micro-batch per step to one sequence per micro-batch.
    equal(s.microBatches[0], ms[0]);
    equal(s.microBatches.at(-1), ms.at(-1));
  }
  const priced = space.splits.reduce((n, s) => n + [...splitPlans(s)].length * RECOMPUTE.length, 0);
  equal(priced, space.priced);
  throws(
    () => planSpace(model, 4096, 100),
    /the search would price [\d,]+ plans on 4096 ranks even with one micro-batch count per split, over its bound of 100/,
  );
  throws(
    () => planSpace({ ...model, batchSize: 2 ** 24 + 1 }, 8),
    /global batch 16777217 exceeds the search's maximum 16777216/,
  );
});
