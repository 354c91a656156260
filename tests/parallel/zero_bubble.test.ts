/**
 * ZB-H1 as data (src/parallel/pipeline/zero_bubble.ts): valid and deadlock-free for every p, m ≥ p
 * tried; on the simulated clock with equal F, B, W costs its bubble is the paper's
 * (p−1)(T_F + T_B − T_W) — a third of 1F1B's — and its peak in flight is 1F1B's; the plan's rules
 * refuse what this slice does not run, naming the rule.
 */
import { equal, ok, throws } from 'node:assert/strict';
import {
  checkSchedule,
  makeSchedule,
  peakInFlight,
  scheduleProblems,
} from '../../src/parallel/pipeline/pipeline_schedule.ts';
import { dryRun } from '../../src/parallel/pipeline/pipeline_sim.ts';
import { zbH1, zbH1BubbleMs } from '../../src/parallel/pipeline/zero_bubble.ts';
import { checkPlan } from '../../src/parallel/plan/rules.ts';
import { makePlan } from '../../src/parallel/plan/plan.ts';

const EQUAL = { forwardMs: 1, backwardMs: 2, weightMs: 1, p2pMs: 0 };
/** Idle ms of one rank over the step: makespan minus the rank's m·(F + B + W) of compute. */
const bubbleMs = (kind: 'zb-h1' | '1f1b', p: number, m: number) =>
  dryRun(makeSchedule(kind, p, m), EQUAL).makespan - 3 * m;

Deno.test('ZB-H1: valid for p ∈ {1..5}, m ∈ {p..2p+1}; every (micro, stage) runs F, B, W once, W after B', () => {
  for (let p = 1; p <= 5; p++) {
    for (let m = p; m <= 2 * p + 1; m++) {
      const s = checkSchedule(makeSchedule('zb-h1', p, m));
      s.ranks.forEach((list, r) => {
        for (const kind of ['forward', 'backward', 'weight']) {
          equal(list.filter((a) => a.kind === kind).length, m, `p ${p} m ${m} rank ${r}: ${kind} count`);
        }
      });
    }
  }
  throws(() => zbH1(4, 3), /micro-batches 3 must be at least pp 4 \(rule zb-h1-micro-batches\)/);
  // The check sees a W missing or run before its B.
  const s = zbH1(2, 2), list = s.ranks[1], w = list.findIndex((a) => a.kind === 'weight');
  const moved = { ...s, ranks: [s.ranks[0], [list[w], ...list.filter((_, i) => i !== w)]] };
  ok(scheduleProblems(moved).some((x) => /weight \(action 0\) runs before its backward/.test(x)), 'W before B');
  const dropped = { ...s, ranks: [s.ranks[0], list.filter((_, i) => i !== w)] };
  ok(scheduleProblems(dropped).some((x) => /no weight \(W\) pass in a split schedule/.test(x)), 'W missing');
});

Deno.test('ZB-H1 on the simulated clock, equal F, B, W: bubble (p−1)(T_F+T_B−T_W) within 5 %, a third of 1F1B; 1F1B peak memory', () => {
  for (const [p, m] of [[4, 8], [2, 4], [3, 7], [8, 16]]) {
    const zb = bubbleMs('zb-h1', p, m), one = bubbleMs('1f1b', p, m), formula = zbH1BubbleMs(p, 1, 1, 1);
    ok(Math.abs(zb - formula) <= 0.05 * formula, `p ${p} m ${m}: ZB-H1 bubble ${zb} vs formula ${formula}`);
    ok(Math.abs(one - 3 * (p - 1)) <= 1e-9, `p ${p} m ${m}: 1F1B bubble ${one} vs (p−1)(F+B+W)`);
    ok(zb <= one / 3 + 1e-9, `p ${p} m ${m}: ZB-H1 ${zb} at most a third of 1F1B ${one}`);
    // Memory: no rank holds more micro-batches awaiting W than 1F1B's first rank holds awaiting B.
    equal(
      Math.max(...peakInFlight(makeSchedule('zb-h1', p, m))),
      Math.max(...peakInFlight(makeSchedule('1f1b', p, m))),
    );
  }
  // The paper's setting: p 4, m 8 — ZB-H1's idle share is the formula's, against 1F1B's.
  const zb = dryRun(makeSchedule('zb-h1', 4, 8), EQUAL), one = dryRun(makeSchedule('1f1b', 4, 8), EQUAL);
  ok(Math.abs(zb.bubble - 3 / 27) < 0.05 * 3 / 27, `p 4 m 8: ZB-H1 bubble fraction ${zb.bubble} vs 3/27`);
  ok(Math.abs(one.bubble - 9 / 33) < 1e-9, `p 4 m 8: 1F1B bubble fraction ${one.bubble} vs 9/33`);
  // Deadlock-free under rendezvous sends too (checkSchedule simulated both); the timeline names W.
  ok(dryRun(zbH1(4, 8), EQUAL, 'rendezvous').ranks[0].some((x) => x.label === 'W0'), 'W spans on the timeline');
  throws(() => dryRun(zbH1(2, 2), { ...EQUAL, weightMs: 3 }), /weightMs 3 exceeds backwardMs 2/);
});

Deno.test('plan rules: --schedule zb-h1 needs micro-batches ≥ pp and refuses ZeRO-3, each refusal naming its rule', () => {
  const model = { nLayer: 4, nHead: 2, nEmbd: 16, blockSize: 8, batchSize: 8, vocabSize: 65 };
  const check = (over: Parameters<typeof makePlan>[0], world: number) => () =>
    checkPlan(makePlan({ schedule: 'zb-h1', ...over }), model, world);
  check({ pp: 4, microBatches: 4 }, 4)();
  check({ pp: 2, microBatches: 8 }, 2)();
  // What composes since W fires the gradient syncs: dp, tp (+ sp), cp, ep, ZeRO-1/2.
  check({ pp: 2, dp: 2, microBatches: 2 }, 4)();
  check({ pp: 2, tp: 2, sp: true, microBatches: 2 }, 4)();
  check({ pp: 2, cp: 2, microBatches: 2 }, 4)();
  check({ pp: 2, dp: 2, tp: 2, zero: 1, microBatches: 2 }, 8)();
  check({ pp: 2, dp: 2, zero: 2, microBatches: 2 }, 4)();
  checkPlan(makePlan({ schedule: 'zb-h1', pp: 2, dp: 2, ep: 2, microBatches: 2 }), { ...model, nExpert: 4 }, 4);
  throws(check({ pp: 4, microBatches: 2 }, 4), /--schedule zb-h1 needs micro-batches 2 ≥ pp 4/);
  throws(
    check({ pp: 2, dp: 2, zero: 3, microBatches: 2 }, 4),
    /--schedule zb-h1 does not compose with ZeRO-3 yet \(dp, tp, sp, cp, ep and ZeRO-1\/2 do\) \(rule zb-h1-zero3\)/,
  );
});
