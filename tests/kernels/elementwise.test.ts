import { gpuTest } from '../util/gpu.ts';
import { assertClose, assertFiniteDiff, assertRelRms, dot, randn } from '../util/assert.ts';
import { add, addBias, addBiasInPlace, axpy, geluBackward, geluForward } from '../../src/kernels/elementwise.ts';
import { addBiasRef, geluBackwardRef, geluRef } from '../../src/reference/elementwise.ts';

Deno.test('gelu reference backward matches finite differences', () => {
  const x = randn(50, 1, -4, 4);
  const w = randn(50, 2);
  assertFiniteDiff((v) => dot(geluRef(v), w), x, geluBackwardRef(x, w), 'gelu');
});

for (const n of [1, 7, 63, 65, 257, 70_001]) {
  gpuTest(`gelu forward/backward n=${n}`, async (gpu) => {
    const x = randn(n, n, -6, 6);
    const dy = randn(n, n + 1);
    const tx = gpu.upload(Float32Array.from(x), [n]);
    const tdy = gpu.upload(Float32Array.from(dy), [n]);
    const y = gpu.empty([n]);
    geluForward(gpu, tx, y);
    assertClose(await gpu.read(y), geluRef(x), 'gelu fwd');
    const dx = gpu.upload(new Float32Array(n).fill(0.5), [n]); // accumulates onto 0.5
    geluBackward(gpu, tx, tdy, dx);
    const ref = geluBackwardRef(x, dy).map((v) => v + 0.5);
    assertClose(await gpu.read(dx), ref, 'gelu bwd');
    assertRelRms(await gpu.read(dx), ref, 'gelu bwd');
    for (const t of [tx, tdy, y, dx]) t.release();
  });
}

gpuTest('add, addBias and axpy on ragged shapes', async (gpu) => {
  for (const [n, c] of [[1, 1], [7, 7], [65, 13], [257 * 3, 257]]) {
    const a = randn(n, 3), b = randn(n, 4), bias = randn(c, 5);
    const ta = gpu.upload(Float32Array.from(a), [n]), tb = gpu.upload(Float32Array.from(b), [n]);
    const tbias = gpu.upload(Float32Array.from(bias), [c]);
    const out = gpu.empty([n]);
    add(gpu, ta, tb, out);
    assertClose(await gpu.read(out), a.map((v, i) => v + b[i]), 'add');
    addBias(gpu, ta, tbias, out);
    assertClose(await gpu.read(out), addBiasRef(a, bias), 'addBias');
    addBiasInPlace(gpu, out, tbias);
    assertClose(await gpu.read(out), addBiasRef(addBiasRef(a, bias), bias), 'addBiasInPlace');
    addBias(gpu, ta, tbias, out);
    axpy(gpu, -2.5, tb, out);
    assertClose(await gpu.read(out), addBiasRef(a, bias).map((v, i) => v - 2.5 * b[i]), 'axpy');
    for (const t of [ta, tb, tbias, out]) t.release();
  }
});
