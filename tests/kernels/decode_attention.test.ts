/**
 * Decoding attention over a KV cache (src/kernels/decode_attention.ts) against its f64
 * reference (src/reference/decode_attention.ts), on ragged lengths, with the f32
 * bounds of docs/design.md#test-tolerances: elementwise and relative RMS. Cache rows past len hold NaN, so a kernel
 * that reads beyond the attended keys fails.
 */
import { equal } from 'node:assert/strict';
import { gpuTest } from '../util/gpu.ts';
import { assertClose, assertRelRms, assertThrows, randn } from '../util/assert.ts';
import { decodeAttention, decodeLoopTrips, kvAppend } from '../../src/kernels/decode_attention.ts';
import { CPU_LOOP_BUDGET } from '../../src/kernels/flash_tuning.ts';
import { decodeAttentionRef, kvAppendRef } from '../../src/reference/decode_attention.ts';
import { attentionForwardRef } from '../../src/reference/attention.ts';

// [B, nh, hs, Tmax, len, |x| range]: len of {1, 13, 17, 65, 257, 999} (none a multiple of the
// 64-wide workgroup but 1), hs of {7, 16, 32, 64, 128} (7: below a vec4; 128: the limit), len
// below and at Tmax, and ±8 / ±32 inputs whose scores reach ~±20 / ~±300 (past ~88 exp overflows
// f32 unless the max is subtracted).
const CASES: [number, number, number, number, number, number?][] = [
  [1, 1, 32, 1, 1],
  [2, 3, 32, 17, 17],
  [1, 2, 64, 100, 65],
  [2, 1, 128, 300, 257],
  [1, 2, 7, 20, 13],
  [3, 2, 16, 64, 1],
  [1, 4, 64, 1000, 999],
  [1, 2, 32, 64, 33, 8],
  [1, 2, 64, 64, 40, 32],
  // Near the CPU adapters' loop budget (decodeLoopTrips = 33 386 of 34 000): lavapipe would stop a
  // longer invocation silently, so this checks that the count is right where it matters.
  [1, 1, 128, 8300, 8300],
];

for (const [b, nh, hs, tMax, len, range = 2] of CASES) {
  gpuTest(`decode attention B=${b} nh=${nh} hs=${hs} Tmax=${tMax} len=${len} |x|≤${range}`, async (gpu) => {
    const c = nh * hs, dims = { b, c, nh, tMax };
    const seed = b * 1000 + nh * 100 + hs + len;
    // Cached rows 0 … len−2 random, the rest NaN; the new token goes to row len−1.
    const k0 = randn(b * nh * tMax * hs, seed, -range, range), v0 = randn(b * nh * tMax * hs, seed + 1);
    for (let r = 0; r < b * nh * tMax; r++) {
      if (r % tMax >= len - 1) { for (let i = 0; i < hs; i++) k0[r * hs + i] = v0[r * hs + i] = NaN; }
    }
    const qkv = randn(b * 3 * c, seed + 2, -range, range);
    const ref = kvAppendRef(qkv, k0, v0, dims, 1, len - 1);
    const yRef = decodeAttentionRef(qkv, ref.k, ref.v, { ...dims, len });

    const tq = gpu.upload(Float32Array.from(qkv), [b, 1, 3 * c]);
    const tk = gpu.upload(Float32Array.from(k0), [b, nh, tMax, hs]);
    const tv = gpu.upload(Float32Array.from(v0), [b, nh, tMax, hs]);
    const ty = gpu.upload(new Float32Array(b * c).fill(NaN), [b, 1, c]);
    kvAppend(gpu, tq, tk, tv, dims, 1, len - 1);
    // The append is a copy: bit-equal (NaN rows stay NaN).
    const [gk, gv] = [await gpu.read(tk), await gpu.read(tv)];
    for (let i = 0; i < gk.length; i++) {
      if (!Object.is(gk[i], Math.fround(ref.k[i])) || !Object.is(gv[i], Math.fround(ref.v[i]))) {
        throw new Error(`kvAppend: element ${i} is (${gk[i]}, ${gv[i]}), expected (${ref.k[i]}, ${ref.v[i]})`);
      }
    }
    decodeAttention(gpu, tq, tk, tv, ty, dims, len);
    const y = await gpu.read(ty);
    assertClose(y, yRef, 'y');
    assertRelRms(y, yRef, 'y');
    for (const t of [tq, tk, tv, ty]) t.release();
  });
}

gpuTest('decode attention: appending a prompt then one query equals causal attention at that row', async (gpu) => {
  // Independent check of the reference: prefill t tokens, decode the last one; the result is row
  // t−1 of llm.c-style causal attention (src/reference/attention.ts) over the same qkv.
  const b = 2, t = 11, nh = 2, hs = 16, c = nh * hs, tMax = 16, dims = { b, c, nh, tMax };
  const qkv = randn(b * t * 3 * c, 77);
  const full = attentionForwardRef(qkv, { b, t, c, nh });
  const tq = gpu.upload(Float32Array.from(qkv), [b, t, 3 * c]);
  const tk = gpu.zeros([b, nh, tMax, hs]), tv = gpu.zeros([b, nh, tMax, hs]);
  kvAppend(gpu, tq, tk, tv, dims, t, 0);
  const last = new Float32Array(b * 3 * c);
  for (let r = 0; r < b; r++) {
    last.set(Float32Array.from(qkv.subarray(((r + 1) * t - 1) * 3 * c, (r + 1) * t * 3 * c)), r * 3 * c);
  }
  const tl = gpu.upload(last, [b, 1, 3 * c]), ty = gpu.zeros([b, 1, c]);
  decodeAttention(gpu, tl, tk, tv, ty, dims, t);
  const want: number[] = [];
  for (let r = 0; r < b; r++) want.push(...full.y.subarray(((r + 1) * t - 1) * c, (r + 1) * t * c));
  const y = await gpu.read(ty);
  equal(y.length, want.length);
  assertClose(y, want, 'y vs causal attention row t−1');
  assertRelRms(y, want, 'y vs causal attention row t−1');
  for (const x of [tq, tk, tv, tl, ty]) x.release();
});

gpuTest('decode attention refuses a cache overflow, a bad len and mismatched shapes', (gpu) => {
  const dims = { b: 1, c: 8, nh: 2, tMax: 4 };
  const q = gpu.zeros([1, 1, 24]), q2 = gpu.zeros([1, 2, 24]);
  const k = gpu.zeros([1, 2, 4, 4]), v = gpu.zeros([1, 2, 4, 4]), y = gpu.zeros([1, 1, 8]);
  assertThrows(() => kvAppend(gpu, q, k, v, dims, 1, 4), 'do not fit a cache of 4 positions (allowed 0 … 3)');
  assertThrows(() => kvAppend(gpu, q2, k, v, dims, 2, 3), 'positions 3 … 4 do not fit');
  assertThrows(() => decodeAttention(gpu, q, k, v, y, dims, 5), 'len must be an integer in 1 … 4');
  assertThrows(() => decodeAttention(gpu, q, k, v, y, dims, 0), 'len must be an integer in 1 … 4');
  assertThrows(() => decodeAttention(gpu, q2, k, v, y, dims, 2), 'qkv has shape [1,2,24]');
  assertThrows(() => decodeAttention(gpu, q, k, k, y, { ...dims, nh: 3 }, 2), 'not divisible by heads');
  for (const x of [q, q2, k, v, y]) x.release();
});

gpuTest('decode attention: a length past the loop budget is refused on CPU adapters, runs on GPUs', async (gpu) => {
  const hs = 128, tMax = 8500, dims = { b: 1, c: hs, nh: 1, tMax };
  equal(decodeLoopTrips(8300, hs) <= CPU_LOOP_BUDGET, true);
  equal(decodeLoopTrips(tMax, hs) > CPU_LOOP_BUDGET, true);
  const q = gpu.upload(Float32Array.from(randn(3 * hs, 1)), [1, 1, 3 * hs]), y = gpu.zeros([1, 1, hs]);
  const k = gpu.zeros([1, 1, tMax, hs]), v = gpu.zeros([1, 1, tMax, hs]);
  if (gpu.isCpu) {
    assertThrows(() => decodeAttention(gpu, q, k, v, y, dims, tMax), "exceed one invocation's loop budget");
  } else {
    decodeAttention(gpu, q, k, v, y, dims, tMax); // zero values: y = 0
    assertClose(await gpu.read(y), new Float64Array(hs), 'y');
  }
  for (const x of [q, k, v, y]) x.release();
});
