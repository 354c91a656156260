/**
 * Megatron tensor parallelism (tp 2) and sequence parallelism (tp 2 + sp) of the tiny GPT
 * against the single-rank Trainer: 10 steps with losses within 1e-4 relative, gathered step-0
 * gradients within RMS 5e-3, parameters after 10 steps within 1e-4 + 1e-3·|ref|, replicated
 * parameters bit-identical on both ranks, and the elements sent per step equal to the
 * Megatron formula exactly (stated below) and to cost.ts stepTraffic for the tp trainer.
 * Ranks are in-process communicators sharing the test's GPU (tp_harness.ts, fast); one run
 * repeats tp2+sp on module workers (tp_worker.ts) with a device each, as a real world runs.
 */
import { deepStrictEqual, ok } from 'node:assert/strict';
import { testGpu } from '../util/gpu.ts';
import { assertClose, assertRelRms } from '../util/assert.ts';
import { maxRel, ringAllReduceSent, TEXT, tinyConfig, WORKER_TEST } from './harness.ts';
import { flat, gather, localTpRun, oddVocabText, tpReference, type TpRunResult, workerTpRun } from './tp_harness.ts';

const TEXT_ODD = oddVocabText(TEXT);
import { parseConfig, type TrainConfig } from '../../src/train/config.ts';
import { makePlan, validatePlan } from '../../src/parallel/plan.ts';
import { collectiveTraffic } from '../../src/comm/cost.ts';
import { stepTraffic, trafficByKind } from '../../src/parallel/cost.ts';
import { sequenceParallelGradElements } from '../../src/parallel/sequence_parallel.ts';
import { shardKind } from '../../src/parallel/tp_table.ts';

/** Elements rank r sends per step, by `group/op`, for tp = 2 (ring algorithms), as the module docs derive. */
function expectedSent(cfg: TrainConfig, sp: boolean, r: number): Record<string, number> {
  const { nLayer: L, nEmbd: C, blockSize: T, batchSize: B, gradAccum: m } = cfg;
  const N = B * T, bsh = N * C, p = 2;
  // Per micro-batch: 2 per layer forward (row-parallel outputs) + 2 backward (column-parallel
  // inputs), the embedding's reduction forward and the LM head input's backward.
  const calls = (4 * L + 2) * m;
  const out: Record<string, number> = {
    // Vocab-parallel cross-entropy: max, target logit, sum of exponentials, N values each.
    'world/ce/allReduce': 3 * m * ringAllReduceSent(N, p, r),
    // Global grad norm: the squared-norm partial of the sharded parameters, one value.
    'world/norm/allReduce': ringAllReduceSent(1, p, r),
  };
  if (!sp) out['world/act/allReduce'] = calls * ringAllReduceSent(bsh, p, r);
  else {
    out['world/act/allGather'] = calls * collectiveTraffic('allGather', 'ring', bsh, p, r).elements;
    out['world/act/reduceScatter'] = calls * collectiveTraffic('reduceScatter', 'ring', bsh, p, r).elements;
    // LayerNorms, row-parallel biases, ln_f and wpe: gradients of the local rows, summed once per step.
    out['world/sp-grads/allReduce'] = ringAllReduceSent(sequenceParallelGradElements(L, C, T), p, r);
  }
  return out;
}

/** cost.ts's prediction for the same run under the tp trainer, elements by `dim/collective`, and whether every row is exact. */
function costByKind(cfg: TrainConfig, sp: boolean, vocabSize: number, r: number): { byKind: Record<string, number>; allExact: boolean } {
  const plan = makePlan({ tp: 2, sp, microBatches: cfg.gradAccum });
  const model = { nLayer: cfg.nLayer, nHead: cfg.nHead, nEmbd: cfg.nEmbd, blockSize: cfg.blockSize, batchSize: cfg.batchSize * cfg.gradAccum, vocabSize };
  const rows = stepTraffic(validatePlan(plan, model, 2), model, r, { trainer: 'tp' });
  return { byKind: Object.fromEntries(trafficByKind(rows)), allExact: rows.every((x) => x.exact) };
}

function checkRun(what: string, over: Partial<TrainConfig>, sp: boolean, res: TpRunResult[], ref: Awaited<ReturnType<typeof tpReference>>): void {
  const cfg = parseConfig(over);
  for (const r of res) {
    ok(maxRel(r.losses, ref.losses) < 1e-4, `${what}: losses ${r.losses} vs ${ref.losses}`);
    ok(maxRel(r.gradNorms, ref.gradNorms) < 1e-3, `${what}: grad norms ${r.gradNorms} vs ${ref.gradNorms}`);
  }
  const names = Object.keys(ref.grads0);
  const g = gather(res.map((r) => r.grads0), over, ref.vocabSize);
  for (const n of names) assertRelRms(g[n], ref.grads0[n], `${what}: step-0 gradient of ${n}`);
  assertRelRms(flat(g, names), flat(ref.grads0, names), `${what}: step-0 gradients`);
  const params = gather(res.map((r) => r.params), over, ref.vocabSize);
  assertClose(flat(params, names), flat(ref.params, names), `${what}: parameters after ${cfg.steps} steps`);
  for (const n of names.filter((x) => shardKind(x) === 'replicated')) {
    deepStrictEqual(res[1].params[n], res[0].params[n], `${what}: replicated ${n} identical on both ranks`);
  }
  for (const [r, run] of res.entries()) {
    const want = expectedSent(cfg, sp, r), cost = costByKind(cfg, sp, ref.vocabSize, r);
    for (const [s, sent] of run.sent.entries()) deepStrictEqual(sent, want, `${what}: rank ${r} step ${s} traffic`);
    // cost.ts stepTraffic for the tp trainer predicts every collective exactly: the activations,
    // cross-entropy, the 1-element norm sum and (sp) the partial gradients including wpe's T·C.
    const measured: Record<string, number> = {};
    for (const [k, n] of Object.entries(want)) measured[`tp/${k.split('/').pop()}`] = (measured[`tp/${k.split('/').pop()}`] ?? 0) + n;
    ok(cost.allExact, `${what}: every stepTraffic row exact`);
    deepStrictEqual(cost.byKind, measured, `${what}: rank ${r} stepTraffic = measured, by collective`);
  }
}

Deno.test({
  name: 'tp2 and tp2+sp match the single-rank run for 10 steps; traffic = the Megatron formula',
  ...WORKER_TEST,
  fn: async () => {
    const gpu = await testGpu();
    const plain = tinyConfig(), accum = tinyConfig({ gradAccum: 2 });
    const refs = [await tpReference(gpu, plain, TEXT_ODD), await tpReference(gpu, accum, TEXT_ODD)];
    ok(refs[0].vocabSize % 2 === 1, `an odd vocabulary (${refs[0].vocabSize}) exercises the padded row`);
    ok(refs[0].gradNorms.some((n) => n > 0.5), `clipping must be active on some step: norms ${refs[0].gradNorms}`);
    for (const [sp, over, ref] of [[false, plain, refs[0]], [true, plain, refs[0]], [true, accum, refs[1]]] as const) {
      const what = `tp2${sp ? '+sp' : ''} gradAccum ${over.gradAccum ?? 1}`;
      checkRun(what, over, sp, await localTpRun(gpu, 2, over, TEXT_ODD, sp), ref);
    }
  },
});

Deno.test({
  name: 'tp2+sp on two module workers, a device each, matches the single-rank run',
  ...WORKER_TEST,
  fn: async () => {
    const gpu = await testGpu();
    const over = tinyConfig();
    checkRun('tp2+sp on workers', over, true, await workerTpRun(2, over, TEXT_ODD, true), await tpReference(gpu, over, TEXT_ODD));
  },
});

Deno.test({
  name: 'tensor parallel refuses heads or rows that do not split over the group',
  ...WORKER_TEST,
  fn: async () => {
    const gpu = await testGpu();
    const text = TEXT.slice(0, 512);
    await assertRejects(localTpRun(gpu, 2, tinyConfig({ nHead: 1, steps: 1 }), text, false), 'heads 1 not divisible by tp 2');
    await assertRejects(localTpRun(gpu, 2, tinyConfig({ batchSize: 1, blockSize: 3, steps: 1 }), text, true), 'do not split over tp 2');
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
