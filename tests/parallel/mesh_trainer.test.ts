/**
 * The mesh trainer (src/parallel/mesh/mesh_trainer.ts) composing dp × pp × cp × tp (+ sp, ZeRO-1)
 * against the single-rank Trainer on the same global batch: dp2×tp2×pp2 (8 ranks), dp2×pp2
 * (GPipe and 1F1B), tp2×pp2 with sequence parallelism, dp2×tp2, tp2×pp2 interleaved,
 * cp2 (ring)×tp2+sp×pp2, dp2×cp2 (Ulysses)×tp2 with ZeRO-1. For 10 steps the losses agree
 * within 1e-4 relative and the norms within 1e-3; step-0 gradients gathered from every shard
 * within RMS 5e-3 (not under ZeRO-1, where no rank holds them all); parameters after 10 steps
 * within 1e-4 + 1e-3·|ref|; dp/cp replicas and the tied wte copies identical; the elements each rank sends per step equal the formula of
 * mesh_harness.ts `expectedMeshSent` exactly, and to cost.ts `stepTraffic` for the mesh trainer.
 * Ranks are in-process communicators sharing the test's GPU (src/comm/local.ts); one run
 * repeats tp2×pp2 on module workers (mesh_worker.ts) with a device each, as a real world runs.
 */
import { equal, ok, throws } from 'node:assert/strict';
import { testGpu } from '../util/gpu.ts';
import { TEXT, tinyConfig, WORKER_TEST } from './harness.ts';
import { oddVocabText, twins } from './single_rank.ts';
import { checkMeshRun, localMeshRun, workerMeshRun } from './mesh_harness.ts';
import { parseConfig, type TrainConfig } from '../../src/train/config.ts';
import { makePlan, type ParallelPlan } from '../../src/parallel/plan/plan.ts';
import { checkMeshPlan } from '../../src/parallel/mesh/mesh_trainer.ts';

const TEXT_ODD = oddVocabText(TEXT);

Deno.test({
  name:
    'mesh trainer: dp2×tp2×pp2, dp2×pp2 (GPipe, 1F1B), tp2×pp2+sp, dp2×tp2, tp2×pp2 interleaved, cp2 ring / Ulysses + ZeRO-1 match the single-rank run; traffic exact',
  ...WORKER_TEST,
  fn: async () => {
    const gpu = await testGpu();
    const b8 = tinyConfig({ batchSize: 8 }),
      b4 = tinyConfig(),
      l4 = tinyConfig({ nLayer: 4 }),
      h4 = tinyConfig({ nHead: 4 });
    const twin = twins(gpu, TEXT_ODD), b8ref = await twin(makePlan({}), b8);
    ok(b8ref.vocabSize % 2 === 1, 'an odd vocabulary exercises the padded wte row under tp 2');
    ok(b8ref.gradNorms.some((n) => n > 0.5), `clipping must be active on some step: ${b8ref.gradNorms}`);
    const runs: [string, Partial<ParallelPlan>, Partial<TrainConfig>][] = [
      ['dp2×tp2×pp2 1F1B m2', { dp: 2, tp: 2, pp: 2, microBatches: 2 }, b8],
      ['dp2×pp2 GPipe m2', { dp: 2, pp: 2, schedule: 'gpipe', microBatches: 2 }, b8],
      ['dp2×pp2 1F1B m2', { dp: 2, pp: 2, microBatches: 2 }, b8],
      ['tp2×pp2+sp 1F1B m2', { tp: 2, pp: 2, sp: true, microBatches: 2 }, b4],
      ['dp2×tp2', { dp: 2, tp: 2 }, b4],
      ['tp2×pp2 interleaved v2 m2', { tp: 2, pp: 2, schedule: 'interleaved', virtualStages: 2, microBatches: 2 }, l4],
      ['cp2 (ring)×tp2+sp×pp2 1F1B m2', { cp: 2, cpKind: 'ring', tp: 2, sp: true, pp: 2, microBatches: 2 }, b4],
      ['dp2×cp2 (Ulysses)×tp2 (4 heads) ZeRO-1', { dp: 2, cp: 2, cpKind: 'ulysses', tp: 2, zero: 1 }, h4],
    ];
    for (const [what, p, over] of runs) {
      const plan = makePlan(p);
      const t0 = performance.now();
      checkMeshRun(what, plan, over, await localMeshRun(gpu, plan, over, TEXT_ODD), await twin(plan, over));
      console.log(`${what}: ${((performance.now() - t0) / 1000).toFixed(1)} s`);
    }
  },
});

Deno.test({
  name: 'mesh trainer: tp2×pp2 1F1B on four module workers, a device each, matches the single-rank run',
  ...WORKER_TEST,
  fn: async () => {
    const gpu = await testGpu();
    const over = tinyConfig(), plan = makePlan({ tp: 2, pp: 2, microBatches: 2 });
    checkMeshRun(
      'tp2×pp2 on workers',
      plan,
      over,
      await workerMeshRun(plan, over, TEXT_ODD),
      await twins(gpu, TEXT_ODD)(plan, over),
    );
  },
});

Deno.test('mesh trainer refuses unsupported combinations and invalid plans up front, naming them', () => {
  const cfg = parseConfig(tinyConfig({ batchSize: 8 }));
  throws(
    () => checkMeshPlan(makePlan({ dp: 2, pp: 2, ep: 2 }), cfg, 65, 4),
    /ep 2 needs --arch gpt-moe or mamba-moe, got gpt/, // one rule (plan/rule_table.ts), one message
  );
  throws(
    () => checkMeshPlan(makePlan({ cp: 2, cpKind: 'ulysses', tp: 2 }), cfg, 65, 4),
    /heads per TP rank 1 not divisible by the Ulysses degree cp 2/,
  );
  // ZeRO composes with ep, the hybrid over pp and recomputation (tests/parallel/zero_split.test.ts, ep_mesh.test.ts).
  const moe = parseConfig({ ...cfg, arch: 'gpt-moe' });
  equal(checkMeshPlan(makePlan({ dp: 2, pp: 2, ep: 2, zero: 1 }), moe, 65, 4).ranks.length, 2);
  checkMeshPlan(makePlan({ dp: 2, pp: 2, zero: 2 }), parseConfig({ ...cfg, arch: 'hybrid' }), 65, 4);
  checkMeshPlan(makePlan({ dp: 2, zero: 3 }), parseConfig({ ...cfg, recompute: 'full' }), 65, 2);
  throws(() => checkMeshPlan(makePlan({ tp: 2, pp: 2 }), cfg, 65, 8), /world size 8 ≠ dp·pp·cp·tp/);
  throws(
    () => checkMeshPlan(makePlan({ pp: 2 }), parseConfig(tinyConfig({ nLayer: 3 })), 65, 2),
    /layers 3 not divisible by pp 2/,
  );
  throws(
    () => checkMeshPlan(makePlan({ dp: 2, pp: 2, microBatches: 3 }), cfg, 65, 4),
    /mesh trainer: gradAccum 1 must equal the plan's micro-batches 3/,
  );
  throws(
    () =>
      checkMeshPlan(
        makePlan({ dp: 2, pp: 2, microBatches: 2 }),
        parseConfig({ ...cfg, batchSize: 3, gradAccum: 2 }),
        65,
        4,
      ),
    /batch 6 not divisible by micro-batches × dp \(2 × 2\)/,
  );
  const m2 = parseConfig({ ...cfg, batchSize: 4, gradAccum: 2 });
  equal(checkMeshPlan(makePlan({ dp: 2, tp: 2, pp: 2, microBatches: 2 }), m2, 65, 8).ranks.length, 2);
});
