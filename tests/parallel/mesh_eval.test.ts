/**
 * Validation of split models (src/parallel/mesh/mesh_eval.ts): tp2 × pp2, tp2 + sp, cp2 (ring) × pp2
 * and an interleaved pp2 × v2 report, after the same 2 steps, the validation loss the
 * single-rank run reports (within the 1e-4 the plans reproduce it), and their traces stay exact:
 * the forward passes run on `eval` groups, outside every step's accounting. A forward-only
 * program visits every stage once, in order, with a send and a receive per boundary.
 */
import { deepStrictEqual, ok } from 'node:assert/strict';
import { makePlan, type ParallelPlan } from '../../src/parallel/plan/plan.ts';
import { forwardProgram } from '../../src/parallel/mesh/mesh_eval.ts';
import type { TrainConfig } from '../../src/train/config.ts';
import { TEST, tracedRun, traceMismatches } from './trace_harness.ts';

Deno.test('forwardProgram: stage s on rank s mod pp, one send and one receive per stage boundary', () => {
  const p = forwardProgram(2, 2);
  deepStrictEqual(p.ranks[0].map((a) => `${a.kind}@${a.stage}`), [
    'forward@0',
    'send-act@0',
    'recv-act@2',
    'forward@2',
    'send-act@2',
  ]);
  deepStrictEqual(p.ranks[1].map((a) => `${a.kind}@${a.stage}`), [
    'recv-act@1',
    'forward@1',
    'send-act@1',
    'recv-act@3',
    'forward@3',
  ]);
  deepStrictEqual(forwardProgram(1, 1).ranks, [[{ kind: 'forward', micro: 0, stage: 0 }]]);
});

Deno.test({
  name: 'split plans report the single-rank validation loss; their traces stay exact',
  ...TEST,
  fn: async () => {
    const cases: [string, Partial<ParallelPlan>, Partial<TrainConfig>][] = [
      ['tp2 × pp2', { tp: 2, pp: 2 }, {}],
      ['tp2 + sp', { tp: 2, sp: true }, {}],
      ['cp2 ring × pp2', { cp: 2, pp: 2 }, {}],
      ['pp2 interleaved v2', { pp: 2, virtualStages: 2, schedule: 'interleaved', microBatches: 2 }, { nLayer: 4 }],
    ];
    for (const [name, plan, over] of cases) {
      // The plain single-rank run of the same global batch: validation too reads the same rows however it is split.
      const ref = (await tracedRun(makePlan({}), over)).ranks[0].records[1].valLoss!;
      ok(Number.isFinite(ref), 'the single-rank run validates');
      const run = await tracedRun(makePlan(plan), over);
      const v = run.ranks[0].records[1].valLoss!;
      ok(Math.abs(v - ref) <= 1e-4 * ref, `${name}: val loss ${v} vs single-rank ${ref}`);
      deepStrictEqual(traceMismatches(run.ranks, run.trace), [], `${name}: validation stays out of the steps' traffic`);
    }
  },
});

Deno.test({
  name: "a MoE model validated between steps: the next step reads its own routings, not the validation pass's",
  ...TEST,
  fn: async () => {
    // Validation after every step: its forward records routings the next training step must not see.
    const over: Partial<TrainConfig> = { arch: 'gpt-moe', steps: 3, evalInterval: 1, auxLossWeight: 0.01 };
    const ref = (await tracedRun(makePlan({}), over)).ranks[0].records;
    const run = (await tracedRun(makePlan({ tp: 2 }), over)).ranks[0].records;
    for (const [s, r] of run.entries()) {
      ok(
        Math.abs(r.loss - ref[s].loss) <= 1e-4 * ref[s].loss,
        `step ${s}: loss ${r.loss} vs single-rank ${ref[s].loss}`,
      );
      ok(
        Math.abs(r.valLoss! - ref[s].valLoss!) <= 1e-4 * ref[s].valLoss!,
        `step ${s}: val ${r.valLoss} vs ${ref[s].valLoss}`,
      );
    }
  },
});
