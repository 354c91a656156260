import { gpuTest } from '../util/gpu.ts';
import { assertClose, assertFiniteDiff, assertRelRms, assertThrows, dot, randn } from '../util/assert.ts';
import { rmsNormBackward, rmsNormForward } from '../../src/kernels/rmsnorm.ts';
import { rmsNormBackwardRef, rmsNormRef } from '../../src/reference/rmsnorm.ts';
import { rowTuning } from '../../src/kernels/reduce.ts';
import { RAGGED_ROWS, rowVariantTest, VARIANT_LANES } from '../util/row_variants.ts';
import type { Gpu } from '../../src/gpu/context.ts';

const f32 = (a: Float64Array) => Float32Array.from(a);

Deno.test('rmsnorm reference backward matches finite differences', () => {
  for (const [n, c, eps] of [[3, 5, 1e-5], [2, 1, 1e-5], [4, 6, 0.3]] as const) {
    const x = randn(n * c, 1 + c, -2, 3), w = randn(c, 2 + c, 0.5, 1.5), dy = randn(n * c, 4 + c);
    const g = rmsNormBackwardRef(x, w, dy, n, c, eps);
    assertFiniteDiff((v) => dot(rmsNormRef(v, w, n, c, eps).y, dy), x, g.dx, `dx N=${n} C=${c}`, { samples: 100 });
    assertFiniteDiff((v) => dot(rmsNormRef(x, v, n, c, eps).y, dy), w, g.dw, `dw N=${n} C=${c}`);
  }
});

/** Forward and backward on the GPU (grads pre-filled with `fill`), both checked against the reference. */
async function check(gpu: Gpu, n: number, c: number, { eps = 1e-5, fill = 0.25, seed = 1, scale = 1 } = {}) {
  const x = randn(n * c, seed, -scale, scale);
  const w = randn(c, seed + 1, 0.5, 1.5), dy = randn(n * c, seed + 3);
  const tx = gpu.upload(f32(x), [n, c]), tw = gpu.upload(f32(w), [c]);
  const ty = gpu.empty([n, c]), trstd = gpu.empty([n]);
  rmsNormForward(gpu, tx, tw, ty, trstd, eps);
  const ref = rmsNormRef(x, w, n, c, eps);
  const what = `N=${n} C=${c}`;
  assertClose(await gpu.read(ty), ref.y, `${what} y`);
  assertClose(await gpu.read(trstd), ref.rstd, `${what} rstd`);

  const tdy = gpu.upload(f32(dy), [n, c]);
  const tdx = gpu.upload(new Float32Array(n * c).fill(fill), [n, c]);
  const tdw = gpu.upload(new Float32Array(c).fill(fill), [c]);
  rmsNormBackward(gpu, tx, tw, trstd, tdy, tdx, tdw);
  const g = rmsNormBackwardRef(x, w, dy, n, c, eps);
  for (const [name, t, r] of [['dx', tdx, g.dx], ['dw', tdw, g.dw]] as const) {
    const got = await gpu.read(t);
    assertClose(got, r.map((v) => v + fill), `${what} ${name}`);
    // RMS against the gradient itself, so the fill cannot hide an error.
    assertRelRms(got.map((v) => v - fill), r, `${what} ${name}`);
  }
  for (const t of [tx, tw, ty, trstd, tdy, tdx, tdw]) t.release();
}

gpuTest('rmsnorm forward/backward on ragged shapes', async (gpu) => {
  for (const n of [1, 7, 65]) {
    // At C = 1, dx = w·dy·rstd·(1 − xhat²) = w·dy·eps·rstd³: with eps ≪ x² it is f32 rounding
    // of 1 − xhat² (an ill-conditioned input, not a kernel error), so C = 1 uses a large eps.
    for (const c of [1, 13, 64, 257]) await check(gpu, n, c, { seed: n * 1000 + c, eps: c === 1 ? 0.1 : 1e-5 });
  }
});

// CPU adapters get one invocation per row; GPUs share a row between LANES invocations that
// reduce through workgroup memory or, where the adapter has subgroups, subgroup operations.
// Force several lanes so CPU test runs check every reduction path.
await rowVariantTest('rmsnorm with 2 to 256 lanes per row', async (gpu) => {
  for (const lanes of VARIANT_LANES) {
    rowTuning.lanes = lanes;
    for (const n of [1, 7, 65]) {
      for (const c of RAGGED_ROWS) await check(gpu, n, c, { seed: n + c + lanes, eps: c === 1 ? 0.1 : 1e-5 });
    }
  }
});

gpuTest('rmsnorm: other eps, large inputs, many chunks, only one gradient', async (gpu) => {
  await check(gpu, 9, 50, { eps: 0.5 }); // eps reaches the kernel (a large one changes rstd visibly)
  await check(gpu, 5, 33, { scale: 1000 }); // Σx² of large values: no overflow or cancellation
  await check(gpu, 300, 24, { fill: -1 }); // 5 partial-sum chunks for dw
  const n = 70, c = 9;
  const x = randn(n * c, 5), w = randn(c, 6), dy = randn(n * c, 7);
  const tx = gpu.upload(f32(x), [n, c]), tw = gpu.upload(f32(w), [c]), tdy = gpu.upload(f32(dy), [n, c]);
  const ty = gpu.empty([n, c]), tr = gpu.empty([n]), tdw = gpu.zeros([c]), tdx = gpu.zeros([n, c]);
  rmsNormForward(gpu, tx, tw, ty, tr);
  const g = rmsNormBackwardRef(x, w, dy, n, c);
  rmsNormBackward(gpu, tx, tw, tr, tdy, null, tdw);
  assertRelRms(await gpu.read(tdw), g.dw, 'dw alone');
  rmsNormBackward(gpu, tx, tw, tr, tdy, tdx, null);
  assertRelRms(await gpu.read(tdx), g.dx, 'dx alone');
  assertRelRms(await gpu.read(tdw), g.dw, 'dw untouched by a dx-only call');
  for (const t of [tx, tw, tdy, ty, tr, tdw, tdx]) t.release();
});

gpuTest('rmsnorm rejects mismatched shapes', async (gpu) => {
  const x = gpu.empty([4, 8]), w = gpu.empty([8]), bad = gpu.empty([7]), y = gpu.empty([4, 8]), s = gpu.empty([4]);
  assertThrows(() => rmsNormForward(gpu, x, bad, y, s), 'w must be (C=8) (8 elements), got [7]');
  assertThrows(() => rmsNormForward(gpu, x, w, y, bad), 'rstd must be (N=4)');
  assertThrows(() => rmsNormForward(gpu, x, w, y, s, -1), 'eps must be a non-negative number');
  assertThrows(() => rmsNormBackward(gpu, x, w, s, y, y, bad), 'dw must be (C=8)');
  assertThrows(() => rmsNormBackward(gpu, x, w, s, bad, y, w), 'dy must be (N=4, C=8)');
  for (const t of [x, w, bad, y, s]) t.release();
  await gpu.sync(); // nothing invalid reached the device
});
