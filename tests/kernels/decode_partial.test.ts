/**
 * The partial decode (src/kernels/decode_attention.ts `decodeAttentionPartial`, docs/design.md#tree-attention-decoding)
 * against its f64 reference on ragged lengths and head sizes, with NaN in the cache rows past len; and the references
 * among themselves: merging the partials of any split of the cache gives decodeAttentionRef over the whole of it, and
 * o/ℓ of one partial is decodeAttention's y. Also the append of a run of qkv's tokens (kvAppend's `from`) that a rank
 * of a sharded cache uses.
 */
import { gpuTest } from '../util/gpu.ts';
import { assertClose, assertRelRms, assertThrows, randn } from '../util/assert.ts';
import { deepStrictEqual } from 'node:assert/strict';
import { decodeAttention, decodeAttentionPartial, kvAppend } from '../../src/kernels/decode_attention.ts';
import {
  decodeAttentionRef,
  decodePartialRef,
  kvAppendRef,
  mergePartialsRef,
} from '../../src/reference/decode_attention.ts';

// [B, nh, hs, Tmax, len, |x| range]: lengths off the 64-wide workgroup, hs below a vec4 and at the
// limit, ±16 inputs whose scores pass exp's f32 range unless m is subtracted.
const CASES: [number, number, number, number, number, number?][] = [
  [1, 1, 32, 1, 1],
  [2, 3, 16, 40, 37],
  [1, 2, 7, 20, 13],
  [2, 1, 128, 300, 257],
  [1, 4, 64, 700, 699, 16],
];

for (const [b, nh, hs, tMax, len, range = 2] of CASES) {
  gpuTest(`decode partial B=${b} nh=${nh} hs=${hs} Tmax=${tMax} len=${len} |x|≤${range}`, async (gpu) => {
    const c = nh * hs, dims = { b, c, nh, tMax };
    const seed = 7 * b + 31 * nh + hs + len;
    const k = randn(b * nh * tMax * hs, seed, -range, range), v = randn(b * nh * tMax * hs, seed + 1);
    for (let r = 0; r < b * nh * tMax; r++) {
      if (r % tMax >= len) { for (let i = 0; i < hs; i++) k[r * hs + i] = v[r * hs + i] = NaN; }
    }
    const qkv = randn(b * 3 * c, seed + 2, -range, range);
    const ref = decodePartialRef(qkv, k, v, { ...dims, len });
    const tq = gpu.upload(Float32Array.from(qkv), [b, 1, 3 * c]);
    const tk = gpu.upload(Float32Array.from(k), [b, nh, tMax, hs]);
    const tv = gpu.upload(Float32Array.from(v), [b, nh, tMax, hs]);
    const tp = gpu.upload(new Float32Array(b * nh * (hs + 2)).fill(NaN), [b, nh, hs + 2]);
    const ty = gpu.zeros([b, 1, c]);
    decodeAttentionPartial(gpu, tq, tk, tv, tp, dims, len);
    const got = await gpu.read(tp);
    assertClose(got, ref, 'partial [m, ℓ, o]');
    assertRelRms(got, ref, 'partial [m, ℓ, o]');
    // The full-form kernel on the same cache is o/ℓ of this partial.
    decodeAttention(gpu, tq, tk, tv, ty, dims, len);
    const y = await gpu.read(ty);
    assertClose(y, mergePartialsRef([got], b, nh, hs), 'y vs o/ℓ of the partial');
    for (const t of [tq, tk, tv, tp, ty]) t.release();
  });
}

gpuTest('decode partial refuses a wrong partial shape and an empty length', (gpu) => {
  const dims = { b: 1, c: 8, nh: 2, tMax: 4 };
  const q = gpu.zeros([1, 1, 24]), k = gpu.zeros([1, 2, 4, 4]), v = gpu.zeros([1, 2, 4, 4]);
  const good = gpu.zeros([1, 2, 6]), bad = gpu.zeros([1, 1, 8]);
  assertThrows(() => decodeAttentionPartial(gpu, q, k, v, bad, dims, 2), 'partial has shape [1,1,8]');
  assertThrows(() => decodeAttentionPartial(gpu, q, k, v, good, dims, 0), 'len must be an integer in 1 … 4');
  assertThrows(() => decodeAttentionPartial(gpu, q, k, v, k, dims, 2), 'partial');
  for (const x of [q, k, v, good, bad]) x.release();
});

Deno.test('decode partial references: merging the partials of any split equals attention over the whole', () => {
  const b = 2, nh = 3, hs = 5, c = nh * hs, t = 29;
  const k = randn(b * nh * t * hs, 1, -6, 6), v = randn(b * nh * t * hs, 2), qkv = randn(b * 3 * c, 3, -6, 6);
  const whole = decodeAttentionRef(qkv, k, v, { b, c, nh, tMax: t, len: t });
  // A shard's cache (B, nh, len, hs) holds positions start … start + len − 1 of every (b, h).
  const shard = (x: Float64Array, start: number, len: number) => {
    const out = new Float64Array(b * nh * len * hs);
    for (let r = 0; r < b * nh; r++) {
      out.set(x.subarray((r * t + start) * hs, (r * t + start + len) * hs), r * len * hs);
    }
    return out;
  };
  for (const cuts of [[29], [1, 28], [10, 0, 19], [7, 7, 7, 8], [3, 20, 1, 5]]) {
    let start = 0;
    const parts = cuts.map((len) => {
      const p = decodePartialRef(qkv, shard(k, start, len), shard(v, start, len), { b, c, nh, tMax: len, len });
      start += len;
      return p;
    });
    assertClose(mergePartialsRef(parts, b, nh, hs), whole, `cuts ${cuts}`, 1e-12, 1e-12);
  }
});

gpuTest("kvAppend from a run of qkv's tokens (a rank keeps its shard's positions): B = 2, bit-equal", async (gpu) => {
  const b = 2, tq = 7, from = 3, t = 3, nh = 2, hs = 5, c = nh * hs, tMax = 6, pos = 2, dims = { b, c, nh, tMax };
  const qkv = randn(b * tq * 3 * c, 5);
  const picked = new Float64Array(b * t * 3 * c); // tokens from … from + t − 1 of every row
  for (let r = 0; r < b; r++) {
    picked.set(qkv.subarray((r * tq + from) * 3 * c, (r * tq + from + t) * 3 * c), r * t * 3 * c);
  }
  const zeros = new Float64Array(b * nh * tMax * hs);
  const ref = kvAppendRef(Float32Array.from(picked), zeros, zeros, dims, t, pos);
  const tq32 = gpu.upload(Float32Array.from(qkv), [b * tq, 3 * c]);
  const tk = gpu.zeros([b, nh, tMax, hs]), tv = gpu.zeros([b, nh, tMax, hs]);
  kvAppend(gpu, tq32, tk, tv, dims, t, pos, from);
  deepStrictEqual(await gpu.read(tk), Float32Array.from(ref.k));
  deepStrictEqual(await gpu.read(tv), Float32Array.from(ref.v));
  assertThrows(() => kvAppend(gpu, tq32, tk, tv, dims, 3, 0, 5), "tokens 5 … 7 are not in qkv's 7");
  for (const x of [tq32, tk, tv]) x.release();
});
