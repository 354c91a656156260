/**
 * The search's closed-form traffic per dimension equals src/parallel/cost/cost.ts stepTraffic, rank by rank, on small
 * plans.
 */
import { equal, ok, throws } from 'node:assert/strict';
import { stepTraffic } from '../../src/parallel/cost/cost.ts';
import { makePlan, type ParallelPlan, planProblems, planWorldSize } from '../../src/parallel/plan/plan.ts';
import { approxElements, dimCalls, elementsByDim, exactElements } from '../../src/perf/dim_traffic.ts';
import type { Recompute } from '../../src/models/recompute.ts';

const MODEL = { nLayer: 4, nHead: 4, nEmbd: 64, blockSize: 32, batchSize: 24, vocabSize: 65 };

const PLANS: [Partial<ParallelPlan>, Recompute][] = [
  [{ dp: 2 }, 'none'],
  [{ dp: 2, zero: 1 }, 'none'],
  [{ dp: 3, zero: 2, microBatches: 2 }, 'selective'],
  [{ dp: 2, zero: 3, microBatches: 4 }, 'full'],
  [{ tp: 2 }, 'full'],
  [{ tp: 2, sp: true, dp: 2, zero: 2, microBatches: 2 }, 'full'],
  [{ tp: 4, sp: true }, 'selective'],
  [{ pp: 2, microBatches: 4 }, 'none'],
  [{ pp: 2, dp: 2, tp: 2, microBatches: 4 }, 'full'],
  [{ pp: 2, schedule: 'interleaved' as const, virtualStages: 2, microBatches: 4 }, 'none'],
  [{ cp: 2 }, 'selective'],
  [{ cp: 2, cpKind: 'ulysses' as const, tp: 2 }, 'full'],
  [{ cp: 4, dp: 2, zero: 1 }, 'none'],
  [{ dp: 2, pp: 2, cp: 2, tp: 2, sp: true, zero: 1, microBatches: 2 }, 'selective'],
];

Deno.test('dimCalls: exact elements per dimension equal stepTraffic on every rank of small plans', () => {
  for (const [over, recompute] of PLANS) {
    const plan = makePlan(over);
    equal(planProblems(plan, MODEL).length, 0, `valid: ${JSON.stringify(over)}`);
    for (let rank = 0; rank < planWorldSize(plan); rank++) {
      const rows = stepTraffic(plan, MODEL, rank, { trainer: 'mesh', recompute });
      const calls = dimCalls(plan, MODEL, rank, recompute);
      const exact = elementsByDim(calls, exactElements), approx = elementsByDim(calls, approxElements);
      for (const dim of ['dp', 'tp', 'pp', 'cp', 'ep'] as const) {
        const want = rows.filter((r) => r.dim === dim).reduce((a, r) => a + r.elements, 0);
        equal(exact[dim], want, `${JSON.stringify(over)} ${recompute} rank ${rank} ${dim}`);
        // Ring's share without chunk rounding: within one element per call of the exact count.
        const slack = calls.filter((c) => c.dim === dim).reduce((a, c) => a + 2 * c.calls, 0);
        ok(Math.abs(approx[dim] - want) <= slack, `${dim}: approx ${approx[dim]} vs ${want}`);
      }
      const messages = rows.reduce((a, r) => a + r.calls, 0), mine = calls.reduce((a, c) => a + c.calls, 0);
      ok(mine <= messages, `no call counted that stepTraffic lacks (${mine} vs ${messages})`);
    }
  }
});

Deno.test('dimCalls: experts are refused by name', () => {
  throws(() => dimCalls(makePlan({ dp: 2, ep: 2 }), { ...MODEL, nExpert: 2 }, 0, 'none'), /dense GPT models/);
});
