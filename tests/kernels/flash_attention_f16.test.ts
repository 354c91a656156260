/**
 * FlashAttention with f16 q, k, v (mixed precision, docs/design.md#mixed-precision): forward and backward on
 * both kernel families (the CPU adapters' barrier-free one and the GPU path's tiled one, forced
 * here) against the f64 reference of the f16-rounded qkv within the f32 tolerances (the math is
 * f32), and of the unrounded qkv within the f16 tolerance of docs/design.md#test-tolerances, on ragged shapes
 * (T not a multiple of the row blocks, a head size of 7). An adapter without shader-f16 refuses.
 */
import { throws } from 'node:assert/strict';
import { gpuTest, hasShaderF16 } from '../util/gpu.ts';
import { assertClose, assertRelRms, randn } from '../util/assert.ts';
import { flashAttentionBackward, flashAttentionForward, flashTuning } from '../../src/kernels/flash_attention.ts';
import { attentionBackwardRef, attentionForwardRef } from '../../src/reference/attention.ts';
import type { Gpu } from '../../src/gpu/context.ts';

// [B, T, nh, hs, causal]
const CASES: [number, number, number, number, boolean][] = [
  [1, 1, 1, 32, true],
  [2, 17, 3, 32, true],
  [1, 63, 2, 64, false],
  [2, 17, 3, 7, true],
];

async function checkF16(gpu: Gpu, b: number, t: number, nh: number, hs: number, causal: boolean): Promise<void> {
  const c = nh * hs, d = { b, t, c, nh, causal }, what = `f16 qkv B=${b} T=${t} nh=${nh} hs=${hs}`;
  const qkv = randn(b * t * 3 * c, b + t + hs, -2, 2), dy = randn(b * t * c, t + 1);
  const q16 = Float16Array.from(qkv);
  const rounded = Float64Array.from(q16), ref = attentionForwardRef(rounded, d), exact = attentionForwardRef(qkv, d);
  const tq = gpu.upload(q16, [b, t, 3 * c], 'f16'), tdy = gpu.upload(Float32Array.from(dy), [b, t, c]);
  const ty = gpu.empty([b, t, c]), tlse = gpu.empty([b, nh, t]), tdq = gpu.zeros([b, t, 3 * c]);
  flashAttentionForward(gpu, tq, ty, tlse, d);
  flashAttentionBackward(gpu, tq, ty, tlse, tdy, tdq, d);
  const [y, lse, dq] = [await gpu.read(ty), await gpu.read(tlse), await gpu.read(tdq)];
  assertClose(y, ref.y, `${what} y vs the f16 operands`);
  assertClose(lse, ref.lse, `${what} lse vs the f16 operands`);
  const dref = attentionBackwardRef(rounded, ref.att, dy, d);
  assertClose(dq, dref, `${what} dqkv vs the f16 operands`);
  assertRelRms(dq, dref, `${what} dqkv`);
  assertClose(y, exact.y, `${what} y vs f64`, 1e-2, 1e-2);
  assertClose(dq, attentionBackwardRef(qkv, exact.att, dy, d), `${what} dqkv vs f64`, 1e-2, 1e-2);
  for (const x of [tq, tdy, ty, tlse, tdq]) x.release();
}

for (const tiled of [false, true]) {
  gpuTest(`flash attention with f16 qkv, ${tiled ? 'tiled (GPU path)' : 'barrier-free'} kernels`, async (gpu) => {
    if (!hasShaderF16(gpu)) {
      const q = gpu.empty([1, 1, 96], 'f16'), y = gpu.empty([1, 1, 32]), l = gpu.empty([1, 1, 1]);
      throws(
        () => flashAttentionForward(gpu, q, y, l, { b: 1, t: 1, c: 32, nh: 1 }),
        /flashAttentionForward: f16 tensors need the adapter's 'shader-f16' feature/,
      );
      return;
    }
    flashTuning.forceTiled = tiled;
    try {
      for (const [b, t, nh, hs, causal] of CASES) await checkF16(gpu, b, t, nh, hs, causal);
    } finally {
      flashTuning.forceTiled = false;
    }
  });
}
