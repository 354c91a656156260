/**
 * Pipeline parallelism on 2 simulated ranks (module workers, each with its own device), run by
 * the mesh trainer, against the single-rank Trainer on the same global batch: GPipe and 1F1B
 * with m = 2 and 4 micro-batches, interleaved 1F1B (v = 2) on a 4-layer model.
 * mesh_harness.ts checkMeshRun: losses within 1e-4 relative for 10 steps, step-0 gradients
 * gathered from both stages, parameters after 10 steps, the tied wte copies identical, the
 * elements sent per step equal to the formula exactly; and the measured 1F1B timeline shows
 * its bubbles.
 */
import { equal, ok, throws } from 'node:assert/strict';
import { testGpu } from '../util/gpu.ts';
import { TEXT, tinyConfig, WORKER_TEST } from './harness.ts';
import { twins } from './single_rank.ts';
import { checkMeshRun, type MeshRunResult, workerMeshRun } from './mesh_harness.ts';
import { checkPlan } from '../../src/parallel/plan/rules.ts';
import { checkTrainerBatch, pipelineProgram, runFactsOf } from '../../src/parallel/plan/mesh_plan.ts';
import { planModelOf } from '../../src/parallel/run/plan_model.ts';
import { ModelStages } from '../../src/parallel/pipeline/stages.ts';
import { RankContext } from '../../src/parallel/mesh/rank_context.ts';
import { closeLocalWorld, localWorld } from '../../src/comm/local.ts';
import type { Span } from '../../src/parallel/pipeline/pipeline_sim.ts';
import { parseConfig, type TrainConfig } from '../../src/train/config.ts';
import { makePlan, type ParallelPlan, rankParams } from '../../src/parallel/plan/plan.ts';

const WTE = 'transformer.wte.weight';

/** The measured 1F1B (p 2, m 4) timeline of one step: bubbles where the schedule has them. */
function checkBubbles(step: number, [t0, t1]: MeshRunResult[]): void {
  const spans = (x: MeshRunResult) => x.timelines[step];
  // Absolute wall times, so the two ranks' clocks line up.
  const at = (x: MeshRunResult, label: string) => {
    const s = spans(x).find((s) => s.label === label);
    ok(s, `step ${step}: no span '${label}' in ${spans(x).map((s) => s.label)}`);
    return { start: s.start + origin(x), end: s.end + origin(x) };
  };
  const origin = (x: MeshRunResult) => x.origins[step];
  for (const x of [t0, t1]) {
    const l = spans(x);
    for (let i = 1; i < l.length; i++) {
      ok(l[i].start >= l[i - 1].end - 1e-6, `step ${step}: spans overlap at ${l[i].label}`);
    }
  }
  // Stage 1 starts idle: it waits for micro-batch 0's activation, which stage 0 computes first.
  const first: Span = spans(t1)[0];
  ok(
    first.kind === 'idle' && first.label === 'wait ra0@1' && first.end > first.start,
    `stage 1 starts waiting: ${JSON.stringify(first)}`,
  );
  ok(at(t1, 'F0@1').start >= at(t0, 'F0@0').end - 1, 'stage 1 runs F0 only after stage 0 finished it');
  // Stage 0 ends idle: after its last forward it waits for the gradient of micro 3, which needs stage 1's F3 and B3.
  const lastF = spans(t0).findIndex((s) => s.label === 'F3@0');
  const idleAfter = spans(t0).slice(lastF).filter((s) => s.kind === 'idle');
  ok(
    idleAfter.some((s) => s.label === 'wait rg3@0' && s.end > s.start),
    `stage 0 idles after F3: ${idleAfter.map((s) => s.label)}`,
  );
  ok(
    at(t0, 'wait rg3@0').end >= at(t1, 'B3@1').end - 1,
    'stage 0 receives the last gradient only after stage 1 computed it',
  );
  ok(at(t0, 'B3@0').start >= at(t1, 'B3@1').end - 1, 'stage 0 runs B3 after stage 1');
}

Deno.test({
  name:
    'pp2 GPipe / 1F1B (m 2, 4), interleaved 1F1B (v2) match the single-rank run; traffic is exact; 1F1B bubbles are measured',
  ...WORKER_TEST,
  fn: async () => {
    const gpu = await testGpu();
    const cfg2 = tinyConfig(), cfg4 = tinyConfig({ nLayer: 4 });
    const twin = twins(gpu, TEXT), ref2 = await twin(makePlan({ pp: 2, microBatches: 2 }), cfg2);
    ok(ref2.gradNorms.some((n) => n > 0.5), `clipping must be active on some step: norms ${ref2.gradNorms}`);
    const runs: [Partial<TrainConfig>, Partial<ParallelPlan>][] = [
      [cfg2, { pp: 2, schedule: 'gpipe', microBatches: 2 }],
      [cfg2, { pp: 2, schedule: 'gpipe', microBatches: 4 }],
      [cfg2, { pp: 2, schedule: '1f1b', microBatches: 2 }],
      [cfg2, { pp: 2, schedule: '1f1b', microBatches: 4 }],
      [cfg4, { pp: 2, schedule: '1f1b', microBatches: 2 }],
      [cfg4, { pp: 2, schedule: 'interleaved', microBatches: 2, virtualStages: 2 }],
    ];
    for (const [over, p] of runs) {
      const plan = makePlan(p), what = `pp${plan.pp} ${plan.schedule} m ${plan.microBatches} (${over.nLayer} layers)`;
      const res = await workerMeshRun(plan, over, TEXT);
      checkMeshRun(what, plan, over, res, await twin(plan, over));
      if (plan.schedule === '1f1b' && plan.microBatches === 4 && over.nLayer === 2) {
        for (let s = 1; s < res[0].timelines.length; s++) checkBubbles(s, res);
      }
    }
    // The host checks a plan once (plan/rules.ts; tests/parallel/plan_rules.test.ts). One whose layers do not split,
    // handed to the ranks without that check, still stops every rank before any message: at the stage split's own
    // invariant (pipeline_stage.ts checkPipelineSplit).
    let msg = '';
    await workerMeshRun(makePlan({ pp: 2, microBatches: 2 }), tinyConfig({ nLayer: 3 }), TEXT).catch((
      e,
    ) => (msg = String(e)));
    ok(/rank \d: .*nLayer \(3\) must be divisible by pp·v \(2·1 = 2\)/.test(msg), msg);
  },
});

Deno.test({
  name: 'pipeline plans: bad splits and batch sizes are refused with the rule they break',
  ...WORKER_TEST,
  fn: async () => {
    const cfg = (over: Partial<TrainConfig>) => parseConfig(tinyConfig(over));
    // The plan's one check (rules.ts checkPlan over the rule table), against the run's model and config.
    const check = (over: Partial<TrainConfig>, p: Partial<ParallelPlan>) => {
      const c = cfg(over), plan = makePlan({ pp: 2, ...p });
      return () => checkPlan(plan, planModelOf(plan, c, 65), undefined, runFactsOf(c));
    };
    throws(check({ nLayer: 3 }, { schedule: 'gpipe', microBatches: 2 }), /layers 3 not divisible by pp 2/);
    throws(
      check({ nLayer: 2 }, { schedule: 'interleaved', microBatches: 2, virtualStages: 2 }),
      /layers 2 not divisible by pp·virtualStages = 2·2/,
    );
    throws(
      check({}, { schedule: '1f1b', microBatches: 3 }),
      /batch 4 not divisible by micro-batches × dp \(3 × 1\)/,
    );
    // A rank's trainer accumulates over exactly the schedule's micro-batches (the host's trainerConfig keeps it).
    throws(
      () => checkTrainerBatch(makePlan({ pp: 2, microBatches: 2 }), cfg({ gradAccum: 3 })),
      /gradAccum 3 must equal the plan's micro-batches 2/,
    );
    throws(
      check({ nLayer: 4, batchSize: 6 }, { schedule: 'interleaved', microBatches: 3, virtualStages: 2 }),
      /interleaved 1F1B needs micro-batches 3 divisible by pp 2/,
    );
    check({}, { schedule: '1f1b', microBatches: 4 })();
    equal(pipelineProgram(makePlan({ pp: 2, microBatches: 4 })).ranks.length, 2);
    const gpu = await testGpu();
    const gcfg = { vocabSize: 65, blockSize: 16, nLayer: 3, nHead: 2, nEmbd: 32, bias: true };
    const [self] = localWorld(1), ctx = new RankContext({ tp: self, vocabSize: 65 });
    const stages = (nLayer: number, r: number) =>
      new ModelStages(gpu, cfg({ nLayer, blockSize: 16, nHead: 2, nEmbd: 32 }), 65, ctx, { ppRank: r, pp: 2, v: 1 });
    throws(() => stages(3, 0), /nLayer \(3\) must be divisible by pp·v/);
    // The stage split: stage 0 embeds, the last stage holds ln_f and a copy of wte (last in its store).
    const names = (r: number) => {
      const st = stages(4, r);
      st.params.destroy();
      const plan = makePlan({ pp: 2 }), model = { ...gcfg, nLayer: 4, batchSize: 4 };
      equal(st.params.count, rankParams(plan, model, r).dense, `rank ${r}: parameter count vs plan.ts rankParams`);
      return st.params.params.map((p) => p.name);
    };
    const [a, b] = [names(0), names(1)];
    closeLocalWorld([self]);
    ok(
      a[0] === WTE && a.includes('transformer.wpe.weight') && a.some((n) => n.startsWith('transformer.h.1.')) &&
        !a.some((n) => n.startsWith('transformer.h.2.')),
      `${a}`,
    );
    ok(
      b.at(-1) === WTE && b.includes('transformer.ln_f.weight') && b.some((n) => n.startsWith('transformer.h.3.')) &&
        !b.includes('transformer.wpe.weight'),
      `${b}`,
    );
  },
});
