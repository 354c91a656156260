/**
 * bf16 rounding in f32 storage (bf16-mixed precision, docs/design.md#mixed-precision) against the arithmetic
 * f64 reference: exactly equal on ragged sizes, across exponents, at ties, subnormals, the top of
 * the range (rounding to inf), ±0, ±inf and NaN, out of place and in place. Runs on every adapter
 * (no device feature).
 */
import { equal, ok, throws } from 'node:assert/strict';
import { gpuTest } from '../util/gpu.ts';
import { randn } from '../util/assert.ts';
import { roundToBf16 } from '../../src/kernels/cast.ts';
import { BF16_MAX, bf16RoundRef } from '../../src/reference/cast.ts';

/** Values that probe every rounding case, then random ones over 60 binades. */
function probes(n: number): Float32Array {
  const edge = [
    0,
    -0,
    1,
    1 + 2 ** -8,
    1 + 3 * 2 ** -8,
    1 + 2 ** -8 + 2 ** -20,
    -(1 + 2 ** -8), // ties to even, just past a tie
    3.4028234663852886e38,
    -3.4e38,
    BF16_MAX,
    1e-40,
    -3e-45,
    2 ** -126, // inf, the largest bf16, subnormals
    Infinity,
    -Infinity,
    NaN,
  ];
  const r = randn(n, n + 11);
  return Float32Array.from({ length: n }, (_, i) => (i < edge.length ? edge[i] : r[i] * 2 ** ((i * 7919) % 60 - 30)));
}

gpuTest('roundToBf16 equals the f64 reference bit for bit, in and out of place, on ragged sizes', async (gpu) => {
  for (const n of [1, 7, 257, 1001]) {
    const host = probes(n);
    const want = bf16RoundRef(Float64Array.from(host));
    const x = gpu.upload(host, [n]), y = gpu.empty([n]);
    roundToBf16(gpu, x, y);
    roundToBf16(gpu, x, x); // in place
    for (const [what, got] of [['out of place', await gpu.read(y)], ['in place', await gpu.read(x)]] as const) {
      for (let i = 0; i < n; i++) {
        ok(Object.is(got[i], want[i]), `n=${n} ${what} [${i}]: ${host[i]} → ${got[i]}, want ${want[i]}`);
      }
    }
    if (n > 16) {
      ok(want.some((v, i) => v !== host[i] && Number.isFinite(v)), 'the sample includes values that round');
      ok(want.some((v, i) => v === Infinity && host[i] !== Infinity), 'the sample includes values that round to inf');
    }
    x.release();
    y.release();
  }
  throws(() => roundToBf16(gpu, gpu.zeros([2]), gpu.zeros([3])), /roundToBf16: sizes differ/);
  throws(() => roundToBf16(gpu, gpu.zeros([2]), gpu.empty([2], 'i32')), /expects f32 → f32, got f32 \[2\] → i32/);
  equal(bf16RoundRef(Float64Array.of(1 + 2 ** -8))[0], 1, 'a tie goes to the even neighbour');
  equal(bf16RoundRef(Float64Array.of(1 + 3 * 2 ** -8))[0], 1 + 2 ** -6, 'a tie goes to the even neighbour (up)');
});
