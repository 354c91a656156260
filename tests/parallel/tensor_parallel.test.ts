/**
 * Megatron tensor parallelism (tp 2) and sequence parallelism (tp 2 + sp, also over 2
 * micro-batches) of the tiny GPT, run by the mesh trainer over the model's own pieces and a
 * RankContext, against the single-rank Trainer: mesh_harness.ts checkMeshRun (10 steps, losses
 * within 1e-4 relative, gathered step-0 gradients, final parameters, replicated parameters
 * identical, the elements sent per step = expectedMeshSent's Megatron formula exactly and =
 * cost.ts stepTraffic). An odd vocabulary exercises the padded wte row. Ranks are in-process
 * communicators sharing the test's GPU; one run repeats tp2+sp on module workers with a device each.
 */
import { deepStrictEqual, ok } from 'node:assert/strict';
import { testGpu } from '../util/gpu.ts';
import { TEXT, tinyConfig, WORKER_TEST } from './harness.ts';
import { oddVocabText, singleRankRun, twins } from './single_rank.ts';
import { checkMeshRun, localMeshRun, workerMeshRun } from './mesh_harness.ts';
import { makePlan } from '../../src/parallel/plan/plan.ts';
import { shardKind } from '../../src/parallel/tensor/tp_table.ts';

const TEXT_ODD = oddVocabText(TEXT);

Deno.test({
  name:
    'tp2 and tp2+sp (also over 2 micro-batches) match the single-rank run for 10 steps; traffic = the Megatron formula',
  ...WORKER_TEST,
  fn: async () => {
    const gpu = await testGpu();
    const b4 = tinyConfig(), twin = twins(gpu, TEXT_ODD), ref = await twin(makePlan({ tp: 2 }), b4);
    ok(ref.vocabSize % 2 === 1, `an odd vocabulary (${ref.vocabSize}) exercises the padded row`);
    ok(ref.gradNorms.some((n) => n > 0.5), `clipping must be active on some step: norms ${ref.gradNorms}`);
    for (
      const [what, p] of [['tp2', { tp: 2 }], ['tp2+sp', { tp: 2, sp: true }], ['tp2+sp m2', {
        tp: 2,
        sp: true,
        microBatches: 2,
      }]] as const
    ) {
      const plan = makePlan(p), res = await localMeshRun(gpu, plan, b4, TEXT_ODD);
      checkMeshRun(what, plan, b4, res, await twin(plan, b4));
      for (const n of Object.keys(ref.grads0).filter((x) => shardKind(x) === 'replicated')) {
        deepStrictEqual(res[1].params[n], res[0].params[n], `${what}: replicated ${n} identical on both ranks`);
      }
    }
  },
});

Deno.test({
  name: 'tp2+sp on two module workers, a device each, matches the single-rank run',
  ...WORKER_TEST,
  fn: async () => {
    const gpu = await testGpu();
    const over = tinyConfig(), plan = makePlan({ tp: 2, sp: true });
    checkMeshRun(
      'tp2+sp on workers',
      plan,
      over,
      await workerMeshRun(plan, over, TEXT_ODD),
      await singleRankRun(gpu, over, TEXT_ODD),
    );
  },
});

Deno.test({
  name: 'tensor parallel refuses heads or rows that do not split over the group',
  ...WORKER_TEST,
  fn: async () => {
    const gpu = await testGpu();
    const text = TEXT.slice(0, 512);
    await assertRejects(
      localMeshRun(gpu, makePlan({ tp: 2 }), tinyConfig({ nHead: 1, steps: 1 }), text),
      'heads 1 not divisible by tp 2',
    );
    await assertRejects(
      localMeshRun(gpu, makePlan({ tp: 2, sp: true }), tinyConfig({ batchSize: 1, blockSize: 3, steps: 1 }), text),
      'not divisible by tp 2',
    );
  },
});

async function assertRejects(p: Promise<unknown>, part: string): Promise<void> {
  let msg = '';
  try {
    await p;
  } catch (e) {
    msg = String(e);
  }
  ok(msg.includes(part), `expected an error containing '${part}', got '${msg}'`);
}
