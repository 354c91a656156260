/**
 * The mesh trainer (src/parallel/mesh_trainer.ts) composing dp × pp × cp × tp (+ sp, ZeRO-1)
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
import { deepStrictEqual, equal, ok, throws } from 'node:assert/strict';
import { testGpu } from '../util/gpu.ts';
import { assertClose, assertRelRms } from '../util/assert.ts';
import { maxRel, TEXT, tinyConfig, WORKER_TEST } from './harness.ts';
import { flat, oddVocabText, tpReference } from './tp_harness.ts';
import { expectedMeshSent, gatherMesh, localMeshRun, type MeshRunResult, workerMeshRun, zeroPadded } from './mesh_harness.ts';
import { parseConfig, type TrainConfig } from '../../src/train/config.ts';
import { makePlan, type ParallelPlan, planMesh, rankParams } from '../../src/parallel/plan.ts';
import { stepTraffic, trafficByKind } from '../../src/parallel/cost.ts';
import { dimOfKey } from '../../src/parallel/run.ts';
import { checkMeshPlan } from '../../src/parallel/mesh_trainer.ts';
const WTE = 'transformer.wte.weight';

const TEXT_ODD = oddVocabText(TEXT);
type Ref = Awaited<ReturnType<typeof tpReference>>;

/**
 * cost.ts `stepTraffic` for the mesh trainer equals the measured traffic exactly, by
 * `dim/collective` (groups mapped to dimensions as run.ts `dimOfKey` does for the mesh): tp
 * (with sp: the partial gradients including wpe's T·C on the first stage), pp p2p and the tied
 * embedding, cp (ring: dK,dV's return hop included; Ulysses: packed q,k,v), the dp·cp sync and
 * the 2-element [norm², loss] sum over the world.
 */
function compareWithCost(what: string, plan: ParallelPlan, over: Partial<TrainConfig>, V: number, r: number, sent: Record<string, number>, flatLen: number): void {
  const cfg = parseConfig(over);
  const model = { nLayer: cfg.nLayer, nHead: cfg.nHead, nEmbd: cfg.nEmbd, blockSize: cfg.blockSize, batchSize: cfg.batchSize, vocabSize: V };
  // ZeRO-1 pads the aligned flat buffer (mesh_zero.ts), not Ψ_r: passed as the one bucket's call size.
  const dpcp = plan.dp * plan.cp, buckets = plan.zero ? [zeroPadded(flatLen, dpcp)] : undefined;
  const rows = stepTraffic(plan, model, r, { buckets, trainer: 'mesh' });
  deepStrictEqual(rows.filter((x) => !x.exact).map((x) => x.what), [], `${what} rank ${r}: every stepTraffic row exact`);
  const measured: Record<string, number> = {};
  for (const [k, n] of Object.entries(sent)) {
    const key = `${dimOfKey('mesh', k)}/${k.split('/').pop()}`;
    measured[key] = (measured[key] ?? 0) + n;
  }
  deepStrictEqual(Object.fromEntries(trafficByKind(rows)), measured, `${what} rank ${r}: stepTraffic = measured, by dim/collective`);
}

function checkRun(what: string, plan: ParallelPlan, over: Partial<TrainConfig>, res: MeshRunResult[], ref: Ref): void {
  const cfg = parseConfig(over);
  // Not the whole config: its MoE fields (nExpert) would make plan.ts count experts.
  const model = { nLayer: cfg.nLayer, nHead: cfg.nHead, nEmbd: cfg.nEmbd, blockSize: cfg.blockSize, batchSize: cfg.batchSize, vocabSize: ref.vocabSize };
  for (const [r, x] of res.entries()) {
    ok(maxRel(x.losses, ref.losses) < 1e-4, `${what} rank ${r}: losses ${x.losses} vs ${ref.losses}`);
    ok(maxRel(x.gradNorms, ref.gradNorms) < 1e-3, `${what} rank ${r}: grad norms ${x.gradNorms} vs ${ref.gradNorms}`);
    equal(x.count, rankParams(plan, model, r).dense, `${what} rank ${r}: parameters held ${x.count} vs plan.ts rankParams ${rankParams(plan, model, r).dense}`);
    const want = expectedMeshSent(plan, over, ref.vocabSize, r, x.count, x.flat);
    for (const [s, sent] of x.sent.entries()) deepStrictEqual(sent, want, `${what} rank ${r} step ${s}: elements sent`);
    compareWithCost(what, plan, over, ref.vocabSize, r, x.sent[0], x.flat);
  }
  const names = Object.keys(ref.grads0);
  // Under ZeRO-1 no rank holds the whole reduced gradient (the norms above check it globally).
  if (!plan.zero) assertRelRms(flat(gatherMesh(plan, res.map((x) => x.grads0), over, ref.vocabSize), names), flat(ref.grads0, names), `${what}: step-0 gradients`);
  assertClose(flat(gatherMesh(plan, res.map((x) => x.params), over, ref.vocabSize), names), flat(ref.params, names), `${what}: parameters after 10 steps`);
  const mesh = planMesh(plan);
  for (let r = 0; r < res.length; r++) {
    const c = mesh.coords(r);
    // dp replicas end bit-identical (same averaged gradients, same update).
    if (c.dp > 0 || c.cp > 0) deepStrictEqual(res[r].params, res[mesh.rankOf({ ...c, dp: 0, cp: 0 })].params, `${what}: dp/cp replica ${r} diverged`);
    // The head's wte copy stays equal to stage 0's (embedding-group gradient sum).
    if (plan.pp > 1 && c.pp === plan.pp - 1) deepStrictEqual(res[r].params[WTE], res[mesh.rankOf({ ...c, pp: 0 })].params[WTE], `${what}: wte copy of rank ${r}`);
  }
}

Deno.test({
  name: 'mesh trainer: dp2×tp2×pp2, dp2×pp2 (GPipe, 1F1B), tp2×pp2+sp, dp2×tp2, tp2×pp2 interleaved, cp2 ring / Ulysses + ZeRO-1 match the single-rank run; traffic exact',
  ...WORKER_TEST,
  fn: async () => {
    const gpu = await testGpu();
    const b8 = tinyConfig({ batchSize: 8 }), b4 = tinyConfig(), l4 = tinyConfig({ nLayer: 4 }), h4 = tinyConfig({ nHead: 4 });
    const refs = new Map<Partial<TrainConfig>, Ref>();
    for (const c of [b8, b4, l4, h4]) refs.set(c, await tpReference(gpu, c, TEXT_ODD));
    ok(refs.get(b8)!.vocabSize % 2 === 1, 'an odd vocabulary exercises the padded wte row under tp 2');
    ok(refs.get(b8)!.gradNorms.some((n) => n > 0.5), `clipping must be active on some step: ${refs.get(b8)!.gradNorms}`);
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
      checkRun(what, plan, over, await localMeshRun(gpu, plan, over, TEXT_ODD), refs.get(over)!);
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
    checkRun('tp2×pp2 on workers', plan, over, await workerMeshRun(plan, over, TEXT_ODD), await tpReference(gpu, over, TEXT_ODD));
  },
});

Deno.test('mesh trainer refuses unsupported combinations and invalid plans up front, naming them', () => {
  const cfg = parseConfig(tinyConfig({ batchSize: 8 }));
  throws(() => checkMeshPlan(makePlan({ dp: 2, pp: 2, ep: 2 }), cfg, 65, 4), /mesh trainer: expert parallelism \(ep 2\) with dp 2 · pp 2 is not supported/);
  throws(() => checkMeshPlan(makePlan({ cp: 2, cpKind: 'ulysses', tp: 2 }), cfg, 65, 4), /heads per TP rank 1 not divisible by the Ulysses degree cp 2/);
  throws(() => checkMeshPlan(makePlan({ dp: 2, zero: 2 }), cfg, 65, 2), /mesh trainer: ZeRO-2 with dp 2 \(stage 1 only\) is not supported/);
  throws(() => checkMeshPlan(makePlan({ tp: 2, pp: 2 }), cfg, 65, 8), /world size 8 ≠ dp·pp·cp·tp/);
  throws(() => checkMeshPlan(makePlan({ pp: 2 }), parseConfig(tinyConfig({ nLayer: 3 })), 65, 2), /layers 3 not divisible by pp 2/);
  throws(() => checkMeshPlan(makePlan({ dp: 2, pp: 2, microBatches: 3 }), cfg, 65, 4), /batch 8 not divisible by micro-batches × dp \(3 × 2\)/);
  equal(checkMeshPlan(makePlan({ dp: 2, tp: 2, pp: 2, microBatches: 2 }), cfg, 65, 8).ranks.length, 2);
});
