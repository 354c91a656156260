/**
 * f16 storage (mixed precision, docs/design.md#test-tolerances): the f32 ↔ f16 casts against Math.f16round, and the
 * matmul with f16 operands (f32 accumulation and output) against the f64 reference — exactly as
 * f32 on the f16-rounded inputs, and within the f16 tolerance of docs/design.md#test-tolerances
 * (|err| ≤ 1e-2 + 1e-2·|ref|) on the unrounded ones — every layout, ragged sizes, both GPU tiles.
 * An adapter without shader-f16 (SwiftShader under Dawn) must refuse with a clear error instead.
 */
import { equal, ok, throws } from 'node:assert/strict';
import { gpuTest, hasShaderF16 } from '../util/gpu.ts';
import { assertClose, randn } from '../util/assert.ts';
import { castToF16, castToF32 } from '../../src/kernels/cast.ts';
import { matmul, matmulTuning } from '../../src/kernels/matmul.ts';
import { matmulRef } from '../../src/reference/matmul.ts';
import type { Gpu } from '../../src/gpu/context.ts';

/** Asserts the refusal an adapter without shader-f16 gives; true when the adapter has it. */
function hasF16(gpu: Gpu): boolean {
  if (hasShaderF16(gpu)) return true;
  const x = gpu.zeros([3]), y = gpu.empty([3], 'f16');
  throws(() => castToF16(gpu, x, y), /f16 tensors need the adapter's 'shader-f16' feature/);
  const a = gpu.empty([1], 'f16');
  throws(() => matmul(gpu, a, y, x, 1, 3, 1), /matmul: f16 tensors need the adapter's 'shader-f16' feature/);
  return false;
}

gpuTest('f32 → f16 → f32 casts round to nearest even, overflow to ±inf, on ragged sizes', async (gpu) => {
  if (!hasF16(gpu)) return;
  for (const n of [1, 7, 257, 1001]) {
    const host = Float32Array.from(randn(n, n), (v, i) => (i === 0 ? -7e4 : i % 89 === 3 ? v * 1e-6 : v * 30));
    const x = gpu.upload(host, [n]), h = gpu.empty([n], 'f16'), back = gpu.empty([n]);
    castToF16(gpu, x, h);
    castToF32(gpu, h, back);
    const half = await gpu.read(h);
    ok(half instanceof Float16Array, 'an f16 tensor reads back as a Float16Array');
    equal(half.length, n);
    const want = Array.from(host, (v) => Math.f16round(v));
    const got = await gpu.read(back);
    for (let i = 0; i < n; i++) {
      ok(
        Object.is(got[i], want[i]) && Object.is(half[i], want[i]),
        `n=${n} [${i}]: ${host[i]} → ${got[i]}, want ${want[i]}`,
      );
    }
    ok(want.some((v) => !Number.isFinite(v)), 'the sample includes values past f16 range');
    for (const t of [x, h, back]) t.release();
  }
  throws(() => castToF16(gpu, gpu.zeros([2]), gpu.empty([3], 'f16')), /sizes differ/);
  throws(() => castToF32(gpu, gpu.zeros([2]), gpu.empty([2])), /expects f16 → f32, got f32/);
});

gpuTest('matmul with f16 operands: every layout, ragged sizes, both GPU tiles, f32 accumulation', async (gpu) => {
  if (!hasF16(gpu)) return;
  for (const tile of [64, 128] as const) {
    matmulTuning.tile = tile;
    try {
      for (const [transA, transB] of [[false, false], [false, true], [true, false], [true, true]]) {
        for (const [m, n, k] of [[1, 1, 1], [7, 65, 63], [130, 33, 17], [65, 7, 300]]) {
          const a = randn(m * k, m + 2 * k), b = randn(k * n, n + 3 * k);
          const a16 = Float16Array.from(a), b16 = Float16Array.from(b);
          const ta = gpu.upload(a16, transA ? [k, m] : [m, k], 'f16');
          const tb = gpu.upload(b16, transB ? [n, k] : [k, n], 'f16');
          const tc = gpu.empty([m, n]);
          matmul(gpu, ta, tb, tc, m, n, k, { transA, transB });
          const got = await gpu.read(tc);
          const what = `f16 ${tile}² ${transA ? 'T' : 'N'}${transB ? 'T' : 'N'} ${m}×${n}×${k}`;
          // The operands as stored: f32 arithmetic on exactly these values.
          assertClose(
            got,
            matmulRef(Float64Array.from(a16), Float64Array.from(b16), m, n, k, { transA, transB }),
            what,
          );
          // Against the unrounded operands: the f16 tolerance.
          assertClose(got, matmulRef(a, b, m, n, k, { transA, transB }), `${what} vs f64`, 1e-2, 1e-2);
          for (const t of [ta, tb, tc]) t.release();
        }
      }
    } finally {
      matmulTuning.tile = 0;
    }
  }
  const a = gpu.empty([2, 1], 'f16'), b = gpu.empty([1, 2], 'f16'), c = gpu.empty([2, 2], 'f16');
  throws(() => matmul(gpu, a, b, c, 2, 2, 1), /matmul: C must be f32, got f16/);
  equal(c.bytes, 8, 'two bytes per f16 element');
});
