/**
 * Exact top-k selection (kernels/select_k.ts) against a reference stable sort, on ragged rows
 * and k (one entry, just under, at and over a workgroup's 256, k past the row), with many ties
 * (integer values) and signed zeros, and causal rows; and top-k attention against its f64
 * reference, with k ≥ T giving exactly the full attention's bits.
 */
import { deepStrictEqual, equal, throws } from 'node:assert/strict';
import { gpuTest } from '../util/gpu.ts';
import { assertClose, assertRelRms, randn } from '../util/assert.ts';
import { topkMask } from '../../src/kernels/select_k.ts';
import { attentionForward } from '../../src/kernels/attention.ts';
import { topkAttentionRef, topkKeepRef } from '../../src/reference/topk_attention.ts';
import { attentionForwardRef } from '../../src/reference/attention.ts';

/** Kept (1), dropped (0) or not live (2), read off a masked row: dropped entries are −∞. */
function keepOf(masked: ArrayLike<number>, n: number, causal: boolean): Uint8Array {
  return Uint8Array.from(
    masked,
    (v: number, i: number) => (causal && i % n > Math.floor(i / n) % n ? 2 : v === -Infinity ? 0 : 1),
  );
}

// [rows, n, k, causal, values]: 'int' draws integers in [-3, 3] (heavy ties), 'zero' ±0 and −1 (the
// k-th largest is a zero, and −0 ties with +0).
const CASES: [number, number, number, boolean, 'real' | 'int' | 'zero'][] = [
  [3, 1, 1, false, 'real'],
  [5, 7, 3, false, 'real'],
  [4, 255, 17, false, 'int'],
  [2, 256, 128, false, 'real'],
  [3, 257, 256, false, 'int'],
  [2, 1000, 1, false, 'int'],
  [1, 4099, 100, false, 'real'],
  [6, 300, 400, false, 'real'],
  [9, 33, 5, true, 'int'],
  [70, 70, 8, true, 'real'],
  [4, 64, 3, false, 'zero'],
  [4, 64, 30, false, 'zero'],
];

for (const [rows, n, k, causal, kind] of CASES) {
  gpuTest(`select-k: rows ${rows} × n ${n}, k ${k}, causal ${causal}, ${kind} values = a stable sort`, async (gpu) => {
    const r = randn(rows * n, rows * 31 + n + k, -3, 3);
    const vals = Float32Array.from(
      r,
      (v) => (kind === 'int' ? Math.round(v) : kind === 'zero' ? [0, -0, -1][Math.abs(Math.round(v * 7)) % 3] : v),
    );
    const x = gpu.upload(vals, [rows, n]);
    topkMask(gpu, x, { rows, n, k, causal });
    const got = await gpu.read(x);
    x.release();
    const want = topkKeepRef(vals, rows, n, k, causal);
    deepStrictEqual(keepOf(got, n, causal), want);
    // Kept and non-live entries are untouched.
    for (let i = 0; i < got.length; i++) if (want[i] !== 0) equal(Object.is(got[i], vals[i]), true, `entry ${i}`);
  });
}

gpuTest('select-k refuses a bad k or a tensor of the wrong shape', (gpu) => {
  const x = gpu.upload(new Float32Array(6), [2, 3]);
  throws(() => topkMask(gpu, x, { rows: 2, n: 3, k: 0 }), /topkMask: k must be a positive integer, got 0/);
  throws(() => topkMask(gpu, x, { rows: 3, n: 3, k: 1 }), /topkMask: x must be \(rows 3, n 3\) f32, got \[2,3\] f32/);
  x.release();
});

// [B, T, nh, hs, k]
const ATTN: [number, number, number, number, number][] = [[1, 17, 2, 8, 1], [2, 33, 3, 16, 4], [1, 65, 2, 32, 9]];
for (const [b, t, nh, hs, k] of ATTN) {
  gpuTest(`top-k attention B=${b} T=${t} nh=${nh} hs=${hs} k=${k} vs the f64 reference`, async (gpu) => {
    const c = nh * hs;
    const d = { b, t, c, nh, causal: true };
    const qkv = randn(b * t * 3 * c, t * 7 + k, -2, 2);
    const tqkv = gpu.upload(Float32Array.from(qkv), [b, t, 3 * c]);
    const ty = gpu.empty([b, t, c]), tatt = gpu.empty([b, nh, t, t]);
    attentionForward(gpu, tqkv, ty, tatt, { ...d, topk: k });
    const y = await gpu.read(ty);
    const ref = topkAttentionRef(qkv, d, k);
    assertClose(y, ref, 'y');
    assertRelRms(y, ref, 'y');
    // Each query row's probabilities: exactly min(k, live) of them are non-zero.
    const att = await gpu.read(tatt);
    for (let row = 0; row < b * nh * t; row++) {
      const nz = att.subarray(row * t, row * t + t).filter((v) => v !== 0).length;
      equal(nz, Math.min(k, (row % t) + 1), `row ${row}`);
    }
    for (const x of [tqkv, ty, tatt]) x.release();
  });
}

gpuTest('top-k attention with k ≥ T is the full attention, bit for bit', async (gpu) => {
  const [b, t, nh, hs] = [2, 29, 2, 16];
  const d = { b, t, c: nh * hs, nh, causal: true };
  const qkv = randn(b * t * 3 * d.c, 5, -2, 2);
  const tqkv = gpu.upload(Float32Array.from(qkv), [b, t, 3 * d.c]);
  const out = async (topk?: number) => {
    const ty = gpu.empty([b, t, d.c]), tatt = gpu.empty([b, nh, t, t]);
    attentionForward(gpu, tqkv, ty, tatt, { ...d, topk });
    const y = await gpu.read(ty);
    ty.release();
    tatt.release();
    return y;
  };
  const full = await out();
  deepStrictEqual(await out(t), full);
  deepStrictEqual(await out(t + 5), full);
  assertClose(full, attentionForwardRef(qkv, d).y, 'full y');
  tqkv.release();
});
