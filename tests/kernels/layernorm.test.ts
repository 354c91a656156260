import { gpuTest } from '../util/gpu.ts';
import { assertClose, assertFiniteDiff, assertRelRms, assertThrows, dot, randn } from '../util/assert.ts';
import { layerNormBackward, layerNormForward } from '../../src/kernels/layernorm.ts';
import { layerNormBackwardRef, layerNormRef } from '../../src/reference/layernorm.ts';
import { Tensor } from '../../src/gpu/tensor.ts';
import { rowTuning } from '../../src/kernels/reduce.ts';
import { RAGGED_ROWS, rowVariantTest, VARIANT_LANES } from '../util/row_variants.ts';
import type { Gpu } from '../../src/gpu/context.ts';

const f32 = (a: Float64Array) => Float32Array.from(a);

Deno.test('layernorm reference backward matches finite differences', () => {
  const n = 3, c = 5;
  const x = randn(n * c, 1, -2, 3), w = randn(c, 2, 0.5, 1.5), b = randn(c, 3);
  const dy = randn(n * c, 4);
  const g = layerNormBackwardRef(x, w, dy, n, c);
  assertFiniteDiff((v) => dot(layerNormRef(v, w, b, n, c).y, dy), x, g.dx, 'dx', { samples: 100 });
  assertFiniteDiff((v) => dot(layerNormRef(x, v, b, n, c).y, dy), w, g.dw, 'dw');
  assertFiniteDiff((v) => dot(layerNormRef(x, w, v, n, c).y, dy), b, g.db, 'db');
});

/** Runs forward and backward on the GPU (grads pre-filled with `fill`) and checks both against the reference. */
async function check(
  gpu: Gpu,
  n: number,
  c: number,
  { shift = 0, eps = 1e-5, fill = 0.25, seed = 1 } = {},
) {
  const x = randn(n * c, seed, shift - 1, shift + 1);
  const w = randn(c, seed + 1, 0.5, 1.5), b = randn(c, seed + 2);
  const dy = randn(n * c, seed + 3);
  const tx = gpu.upload(f32(x), [n, c]), tw = gpu.upload(f32(w), [c]), tb = gpu.upload(f32(b), [c]);
  const ty = gpu.empty([n, c]), tmean = gpu.empty([n]), trstd = gpu.empty([n]);
  layerNormForward(gpu, tx, tw, tb, ty, tmean, trstd, eps);
  const ref = layerNormRef(x, w, b, n, c, eps);
  const what = `N=${n} C=${c}`;
  assertClose(await gpu.read(ty), ref.y, `${what} y`);
  assertClose(await gpu.read(tmean), ref.mean, `${what} mean`);
  assertClose(await gpu.read(trstd), ref.rstd, `${what} rstd`);

  const tdy = gpu.upload(f32(dy), [n, c]);
  const tdx = gpu.upload(new Float32Array(n * c).fill(fill), [n, c]);
  const tdw = gpu.upload(new Float32Array(c).fill(fill), [c]);
  const tdb = gpu.upload(new Float32Array(c).fill(fill), [c]);
  layerNormBackward(gpu, tx, tw, tmean, trstd, tdy, tdx, tdw, tdb);
  const g = layerNormBackwardRef(x, w, dy, n, c, eps);
  for (const [name, t, r] of [['dx', tdx, g.dx], ['dw', tdw, g.dw], ['db', tdb, g.db]] as const) {
    const got = await gpu.read(t);
    const want = r.map((v) => v + fill);
    assertClose(got, want, `${what} ${name}`);
    // RMS against the gradient itself, not gradient + fill, so the fill cannot hide an error.
    // With C = 1, dx is exactly 0 (x̂ ≡ 0), where a relative error has no meaning and a GPU's
    // fused multiply-adds leave rounding residue (~1e-7): assertClose above bounds it.
    if (!(name === 'dx' && c === 1)) assertRelRms(got.map((v) => v - fill), r, `${what} ${name}`);
  }
  for (const t of [tx, tw, tb, ty, tmean, trstd, tdy, tdx, tdw, tdb]) t.release();
}

gpuTest('layernorm forward/backward on ragged shapes', async (gpu) => {
  for (const n of [1, 7, 63, 65, 257]) {
    for (const c of [1, 7, 64, 65, 128, 257]) await check(gpu, n, c, { seed: n * 1000 + c });
  }
});

// CPU adapters get one invocation per row; GPUs share a row between LANES invocations that
// reduce through workgroup memory or, where the adapter has subgroups, subgroup operations.
// Force several lanes so CPU test runs check every reduction path.
await rowVariantTest('layernorm with 2 to 256 lanes per row', async (gpu) => {
  for (const lanes of VARIANT_LANES) {
    rowTuning.lanes = lanes;
    for (const n of [1, 7, 65]) {
      for (const c of RAGGED_ROWS) await check(gpu, n, c, { seed: n * 1000 + c + lanes });
    }
    await check(gpu, 9, 40, { shift: 100, seed: lanes });
  }
});

gpuTest('layernorm: large mean, other eps, long rows, many chunks', async (gpu) => {
  await check(gpu, 33, 96, { shift: 100 }); // shifted moments: no cancellation at |mean| ≫ std
  await check(gpu, 9, 50, { eps: 0.5 }); // eps reaches the kernel (a large one changes rstd visibly)
  await check(gpu, 5, 1500, { fill: -1 }); // a full 256-lane workgroup per row, several elements per lane
  await check(gpu, 1000, 24); // 16 partial-sum chunks for dw/db
  // Two passes over 40000 columns by one invocation would pass lavapipe's 65535-iteration cap.
  await check(gpu, 3, 40000, { fill: 0 });
});

gpuTest('layernorm on slices of flat parameter and gradient buffers', async (gpu) => {
  const n = 20, c = 33;
  const x = randn(n * c, 7), w = randn(c, 8, 0.5, 1.5), b = randn(c, 9), dy = randn(n * c, 10);
  // Parameters and grads at 256-byte-aligned offsets inside one buffer each, as the model lays them out.
  const flatP = gpu.zeros([512]), flatG = gpu.zeros([512]);
  const slice = (t: Tensor, elems: number, len: number) => new Tensor(gpu, t.buffer, [len], 'f32', elems * 4, false);
  const tw = slice(flatP, 64, c),
    tb = slice(flatP, 128, c),
    tdw = slice(flatG, 192, c),
    tdb = slice(flatG, 256, c);
  gpu.write(tw, f32(w));
  gpu.write(tb, f32(b));
  const tx = gpu.upload(f32(x), [n, c]), tdy = gpu.upload(f32(dy), [n, c]);
  const ty = gpu.empty([n, c]), tm = gpu.empty([n]), tr = gpu.empty([n]), tdx = gpu.zeros([n, c]);
  layerNormForward(gpu, tx, tw, tb, ty, tm, tr);
  layerNormBackward(gpu, tx, tw, tm, tr, tdy, tdx, tdw, tdb);
  const g = layerNormBackwardRef(x, w, dy, n, c);
  assertClose(await gpu.read(ty), layerNormRef(x, w, b, n, c).y, 'y');
  assertClose(await gpu.read(tdw), g.dw, 'dw');
  assertClose(await gpu.read(tdb), g.db, 'db');
  // Nothing outside the grad slices was written.
  const all = await gpu.read(flatG);
  assertClose(
    [...all.subarray(0, 192), ...all.subarray(192 + c, 256), ...all.subarray(256 + c)],
    new Float64Array(512 - 2 * c),
    'outside',
  );
  for (const t of [flatP, flatG, tx, tdy, ty, tm, tr, tdx]) t.release();
});

gpuTest('layernorm rejects mismatched shapes', async (gpu) => {
  const x = gpu.empty([4, 8]),
    w = gpu.empty([8]),
    bad = gpu.empty([7]),
    y = gpu.empty([4, 8]),
    s = gpu.empty([4]);
  assertThrows(
    () => layerNormForward(gpu, x, bad, w, y, s, s),
    'w must be (C=8) (8 elements), got [7]',
  );
  assertThrows(() => layerNormForward(gpu, x, w, w, y, bad, s), 'mean must be (N=4)');
  assertThrows(() => layerNormBackward(gpu, x, w, s, s, y, y, w, bad), 'db must be (C=8)');
  for (const t of [x, w, bad, y, s]) t.release();
  await gpu.sync(); // nothing invalid reached the device
});
