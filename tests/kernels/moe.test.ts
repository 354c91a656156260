/**
 * MoE kernels (src/kernels/moe.ts, moe_gather.ts) against the f64 references (src/reference/moe.ts), whose
 * backward passes are first checked by central finite differences; ragged sizes, drops by
 * capacity, several groups, and a scatter-add with repeated targets.
 */
import { deepStrictEqual, ok } from 'node:assert/strict';
import { gpuTest } from '../util/gpu.ts';
import { assertClose, assertFiniteDiff, assertRelRms, assertThrows, dot, randn } from '../util/assert.ts';
import {
  assignSlots,
  auxLossBackward,
  auxLossForward,
  groupColumnSum,
  routerGates,
  routerGatesBackward,
  slotPlan,
  softmaxRows,
  softmaxRowsBackward,
  topKExperts,
} from '../../src/kernels/moe.ts';
import { gatherRows, gatherSumRows, rowDots, scatterAddRows } from '../../src/kernels/moe_gather.ts';
import {
  assignSlotsRef,
  auxLossRef,
  gatesBackwardRef,
  gatesRef,
  gatherRowsRef,
  gatherSumRowsRef,
  rowDotsRef,
  scatterAddRowsRef,
  softmaxRowsBackwardRef,
  softmaxRowsRef,
  topKRef,
} from '../../src/reference/moe.ts';
import type { Gpu } from '../../src/gpu/context.ts';

const f32 = (a: ArrayLike<number>) => Float32Array.from(a);

Deno.test('reference backward passes match central finite differences', () => {
  const n = 5, e = 4, k = 2;
  const x = randn(n * e, 1, -2, 2);
  const w = randn(n * e, 2);
  const y = softmaxRowsRef(x, n, e);
  assertFiniteDiff((v) => dot(softmaxRowsRef(v, n, e), w), x, softmaxRowsBackwardRef(y, w, n, e), 'softmax');
  const top = topKRef(y, n, e, k);
  const wg = randn(n * k, 3);
  for (const renorm of [false, true]) {
    const p = Float64Array.from(y);
    assertFiniteDiff(
      (v) => dot(gatesRef(v, top, n, e, k, renorm), wg),
      p,
      gatesBackwardRef(p, top, wg, n, e, k, renorm),
      `gates renorm=${renorm}`,
    );
  }
  const plan = slotPlan(n * 2, e, 1, 2, 1, 4);
  const probs = softmaxRowsRef(randn(10 * e, 4, -2, 2), 10, e);
  const { load } = assignSlotsRef(topKRef(probs, 10, e, 1), plan);
  assertFiniteDiff(
    (v) => auxLossRef(v, load, plan, 0.3).loss,
    probs,
    auxLossRef(probs, load, plan, 0.3).grad,
    'aux loss',
  );
});

async function readI(gpu: Gpu, t: { size: number }): Promise<Int32Array> {
  // deno-lint-ignore no-explicit-any
  return Int32Array.from(await gpu.read(t as any));
}

gpuTest('router softmax, top-k and gates (forward and backward) match the reference at ragged sizes', async (gpu) => {
  for (const [n, e, k] of [[1, 2, 1], [7, 3, 2], [65, 8, 2], [130, 5, 1]]) {
    const x = randn(n * e, n + e, -3, 3);
    const tx = gpu.upload(f32(x), [n, e]);
    const ty = gpu.empty([n, e]);
    softmaxRows(gpu, tx, ty, n, e);
    const y = await gpu.read(ty);
    const yRef = softmaxRowsRef(x, n, e);
    assertClose(y, yRef, `softmax ${n}×${e}`);
    const dy = randn(n * e, 7);
    const tdy = gpu.upload(f32(dy), [n, e]);
    const tdx = gpu.upload(f32(randn(n * e, 8)), [n, e]);
    const dx0 = await gpu.read(tdx);
    softmaxRowsBackward(gpu, ty, tdy, tdx, n, e);
    const dxRef = softmaxRowsBackwardRef(y, dy, n, e).map((v, i) => v + dx0[i]);
    assertRelRms(await gpu.read(tdx), dxRef, `softmax backward accumulates ${n}×${e}`);
    const top = gpu.empty([n, k], 'i32');
    topKExperts(gpu, ty, top, n, e, k);
    const topHost = await readI(gpu, top);
    deepStrictEqual(topHost, topKRef(y, n, e, k), `top-${k} of ${n}×${e}`);
    // With k = 1 a renormalised gate is identically 1 (zero gradient), so only k = 2 renormalises.
    for (const renorm of k === 1 ? [false] : [false, true]) {
      const tg = gpu.empty([n, k]);
      routerGates(gpu, ty, top, tg, n, e, k, renorm);
      assertClose(await gpu.read(tg), gatesRef(y, topHost, n, e, k, renorm), `gates renorm=${renorm}`);
      const dg = randn(n * k, 11);
      const tdg = gpu.upload(f32(dg), [n, k]);
      const tdp = gpu.zeros([n, e]);
      routerGatesBackward(gpu, ty, top, tdg, tdp, n, e, k, renorm);
      assertRelRms(
        await gpu.read(tdp),
        gatesBackwardRef(y, topHost, dg, n, e, k, renorm),
        `gates backward renorm=${renorm}`,
      );
      for (const t of [tg, tdg, tdp]) t.release();
    }
    for (const t of [tx, ty, tdy, tdx, top]) t.release();
  }
});

gpuTest('slot assignment drops over capacity in token order, per group, first choices first', async (gpu) => {
  for (const [n, e, k, groups, cf] of [[7, 3, 1, 1, 1], [64, 4, 2, 2, 0.5], [90, 5, 2, 3, 1.25], [33, 2, 1, 3, 2]]) {
    const plan = slotPlan(n, e, k, groups, cf, 12);
    // Skewed probabilities so some experts overflow.
    const logits = randn(n * e, n * 3 + k, -2, 2).map((v, i) => v + (i % e === 0 ? 1.5 : 0));
    const probs = softmaxRowsRef(logits, n, e);
    const topRef = topKRef(probs, n, e, k);
    const top = gpu.upload(topRef, [n, k], 'i32');
    const slot = gpu.empty([n, k], 'i32'),
      slotSrc = gpu.empty([e * plan.rows], 'i32'),
      counts = gpu.empty([2 * groups * e], 'i32');
    assignSlots(gpu, top, slot, slotSrc, counts, plan);
    const ref = assignSlotsRef(topRef, plan);
    const what = `n ${n} E ${e} k ${k} G ${groups} cf ${cf}`;
    deepStrictEqual(await readI(gpu, slot), ref.slot, `${what}: slots`);
    deepStrictEqual(await readI(gpu, slotSrc), ref.slotSrc, `${what}: slot sources`);
    deepStrictEqual((await readI(gpu, counts)).slice(groups * e), ref.load, `${what}: first-choice loads`);
    ok(ref.slot.some((s) => s < 0) || cf >= 2, `${what}: the case drops tokens`);
    for (const t of [top, slot, slotSrc, counts]) t.release();
  }
});

gpuTest('gathers, gathered sums, row dots and scatter-add with repeated targets match the reference', async (gpu) => {
  const n = 37, k = 2, c = 19, s = 50;
  const x = randn(n * c, 1), src = randn(s * c, 2), w = randn(n * k, 3);
  // Slot → n·k + j with empty slots, and its inverse with drops.
  const slotSrc = Int32Array.from({ length: s }, (_, i) => (i % 7 === 3 ? -1 : (i * 13) % (n * k)));
  const slot = Int32Array.from({ length: n * k }, (_, i) => (i % 5 === 1 ? -1 : (i * 3) % s));
  const [tx, tsrc, tw] = [gpu.upload(f32(x), [n, c]), gpu.upload(f32(src), [s, c]), gpu.upload(f32(w), [n, k])];
  const [tss, tslot] = [gpu.upload(slotSrc, [s], 'i32'), gpu.upload(slot, [n, k], 'i32')];
  const out = gpu.empty([s, c]);
  gatherRows(gpu, tx, tss, out, c, k, { weights: tw });
  assertClose(await gpu.read(out), gatherRowsRef(x, slotSrc, c, k, w), 'weighted gatherRows');
  gatherRows(gpu, tx, tss, out, c, k, { accumulate: true });
  const twice = gatherRowsRef(x, slotSrc, c, k, w).map((v, i) => v + gatherRowsRef(x, slotSrc, c, k)[i]);
  assertClose(await gpu.read(out), twice, 'unweighted gatherRows accumulates');
  const sum = gpu.empty([n, c]);
  gatherSumRows(gpu, tsrc, tslot, sum, n, k, c, { weights: tw });
  assertClose(await gpu.read(sum), gatherSumRowsRef(src, slot, n, k, c, w), 'gatherSumRows');
  const dots = gpu.upload(f32(w), [n, k]);
  rowDots(gpu, tx, tsrc, tslot, dots, n, k, c);
  assertClose(await gpu.read(dots), rowDotsRef(x, src, slot, n, k, c).map((v, i) => v + w[i]), 'rowDots accumulates');
  // Scatter-add: many rows onto few targets (up to 9 per target) and some dropped rows.
  const target = Int32Array.from({ length: s }, (_, i) => (i % 11 === 0 ? -1 : (i * 7) % 6));
  const sw = f32(randn(s, 5));
  const acc = gpu.upload(f32(x.slice(0, 6 * c)), [6, c]);
  scatterAddRows(gpu, tsrc, target, acc, 6, c, sw);
  assertClose(await gpu.read(acc), scatterAddRowsRef(src, target, 6, c, sw).map((v, i) => v + x[i]), 'scatterAddRows');
  for (const t of [tx, tsrc, tw, tss, tslot, out, sum, dots, acc]) t.release();
});

gpuTest('load-balancing loss and its gradient match the reference (two groups, chained on a loss)', async (gpu) => {
  const n = 42, e = 6, k = 2, groups = 2;
  const plan = slotPlan(n, e, k, groups, 1, 8);
  const probs = softmaxRowsRef(randn(n * e, 21, -2, 2), n, e);
  const topRef = topKRef(probs, n, e, k);
  const tp = gpu.upload(f32(probs), [n, e]);
  const top = gpu.upload(topRef, [n, k], 'i32');
  const slot = gpu.empty([n, k], 'i32'),
    slotSrc = gpu.empty([e * plan.rows], 'i32'),
    counts = gpu.empty([2 * groups * e], 'i32');
  assignSlots(gpu, top, slot, slotSrc, counts, plan);
  const colsum = gpu.zeros([groups * e]);
  groupColumnSum(gpu, tp, colsum, plan);
  const prev = gpu.upload(new Float32Array([2.5, 42, 0.125]), [3]);
  const out = gpu.empty([3]);
  const alpha = 0.01;
  auxLossForward(gpu, colsum, counts, prev, out, plan, alpha);
  const ref = auxLossRef(probs, assignSlotsRef(topRef, plan).load, plan, alpha);
  ok(ref.loss > 0.005, `a loss worth checking: ${ref.loss}`);
  assertClose(await gpu.read(out), [2.5 + ref.loss, 42, 0.125 + ref.loss], 'loss + aux', 1e-6, 1e-5);
  const dp = gpu.zeros([n, e]);
  auxLossBackward(gpu, counts, dp, plan, alpha, 0.5);
  assertRelRms(await gpu.read(dp), ref.grad.map((v) => 0.5 * v), 'aux gradient (scaled)');
  for (const t of [tp, top, slot, slotSrc, counts, colsum, prev, out, dp]) t.release();
});

gpuTest('bad shapes and plans are refused with what was wrong', async (gpu) => {
  assertThrows(() => slotPlan(10, 4, 2, 3, 1, 8), '3 token groups must divide the 10 tokens');
  assertThrows(() => slotPlan(10, 2, 3, 1, 1, 8), 'topK 3 must be at most the 2 experts');
  assertThrows(() => slotPlan(10, 2, 1, 1, 0, 8), 'capacityFactor must be > 0');
  const x = gpu.zeros([4, 3]);
  assertThrows(() => softmaxRows(gpu, x, gpu.zeros([4, 2]), 4, 3), 'y [4,2] must hold (N, E) = 12');
  assertThrows(() => topKExperts(gpu, x, gpu.zeros([4, 1]), 4, 3, 1), 'top must be i32');
  assertThrows(
    () => scatterAddRows(gpu, x, Int32Array.from([0, 5, 1, 1]), gpu.zeros([2, 3]), 2, 3),
    'index[1] = 5 is outside −1 … 1',
  );
  x.release();
  await gpu.sync(); // the refused calls encoded nothing that fails validation
});
