/**
 * Compressors (src/kernels/compress/, issue 14) against their f64 references on ragged sizes:
 * bf16 words and fp16 halves exactly, int8 bytes exactly (a quotient within 1e-4 of a tie may
 * round either way: GPU division is not correctly rounded) and scales to f32 rounding, int4
 * nibbles the same way (tests/kernels/compress_int4.test.ts), sign bits
 * exactly and the scale to 1e-5; wire bytes equal the formulas; error feedback keeps
 * x + e_old = D(c) + e_new per step and Σ D(c) + e = Σ x over steps. An adapter without
 * shader-f16 must refuse the fp16 compressor.
 */
import { equal, ok, throws } from 'node:assert/strict';
import { gpuTest, hasShaderF16 } from '../util/gpu.ts';
import { randn } from '../util/assert.ts';
import type { Gpu } from '../../src/gpu/context.ts';
import {
  bf16Compressor,
  compressedBytes,
  type Compressor,
  ErrorFeedback,
  fp16Compressor,
  int8Compressor,
  releaseCompressed,
  signCompressor,
  topKCompressor,
} from '../../src/kernels/compress/index.ts';
import { bf16RoundRef } from '../../src/reference/cast.ts';
import { bf16PackRef, int8Ref, signRef, unpackInt8, unpackSigns } from '../../src/reference/compress.ts';

const SIZES = [1, 7, 257, 1000, 4099];

/** Values over several binades, with exact zeros, a −0 and, from n = 7, a tie for bf16. */
function sample(n: number, seed: number): Float32Array {
  const r = randn(n, seed);
  return Float32Array.from(
    r,
    (v, i) => (i === 3 ? 0 : i === 4 ? -0 : i === 5 ? 1 + 2 ** -8 : v * 2 ** ((i * 37) % 9 - 4)),
  );
}

/** x through compress and decompress; the wire tensors and D(c) read back. */
async function roundTrip(gpu: Gpu, comp: Compressor, host: Float32Array) {
  const n = host.length, x = gpu.upload(host, [n]), y = gpu.empty([n]);
  const c = comp.allocate(gpu, n);
  comp.compress(gpu, x, c);
  comp.decompress(gpu, c, y);
  const parts = await Promise.all(c.parts.map((t) => gpu.read(t)));
  const out = await gpu.read(y);
  equal(compressedBytes(c), comp.wireBytes(n), `${comp.name} n=${n}: wire bytes`);
  releaseCompressed(c);
  x.release();
  y.release();
  return { parts, y: out };
}

gpuTest('bf16 compressor: packed words and decoded values equal the reference bit for bit', async (gpu) => {
  for (const n of SIZES) {
    const host = sample(n, n);
    const { parts, y } = await roundTrip(gpu, bf16Compressor, host);
    const want = bf16PackRef(Float64Array.from(host)), dec = bf16RoundRef(Float64Array.from(host));
    equal(parts[0].length, Math.ceil(n / 2), 'two values per u32 word');
    for (let w = 0; w < want.length; w++) equal(parts[0][w], want[w], `n=${n} word ${w}`);
    for (let i = 0; i < n; i++) ok(Object.is(y[i], dec[i]), `n=${n} [${i}]: ${y[i]} vs ${dec[i]}`);
    equal(bf16Compressor.wireBytes(n), 4 * Math.ceil(n / 2));
  }
});

gpuTest('fp16 compressor equals Math.f16round, or is refused without shader-f16', async (gpu) => {
  if (!hasShaderF16(gpu)) {
    throws(() => fp16Compressor.allocate(gpu, 3), /f16 tensors need the adapter's 'shader-f16' feature/);
    return;
  }
  for (const n of SIZES) {
    const host = Float32Array.from(sample(n, n + 1), (v, i) => (i === 1 ? 7e4 : v * 100));
    const { parts, y } = await roundTrip(gpu, fp16Compressor, host);
    for (let i = 0; i < n; i++) {
      const want = Math.f16round(host[i]);
      ok(Object.is(parts[0][i], want) && Object.is(y[i], want), `n=${n} [${i}]: ${y[i]} vs ${want}`);
    }
  }
});

gpuTest('int8 block-wise: bytes, scales and dequantised values against the reference', async (gpu) => {
  for (const block of [32, 256, 4096]) {
    const comp = int8Compressor(block);
    for (const n of SIZES) {
      const host = sample(n, 3 * n + block);
      if (n > 64) host.fill(0, 32, 64); // an all-zero block (block 32)
      const { parts, y } = await roundTrip(gpu, comp, host);
      const x = Float64Array.from(host), ref = int8Ref(x, block);
      const q = unpackInt8(parts[0] as Uint32Array, n), s = parts[1];
      for (let b = 0; b < ref.scales.length; b++) {
        ok(Math.abs(s[b] - ref.scales[b]) <= 1e-6 * ref.scales[b], `${comp.name} n=${n} scale ${b}`);
      }
      for (let i = 0; i < n; i++) {
        const at = `${comp.name} n=${n} [${i}] x=${x[i]}`;
        const quotient = ref.scales[Math.floor(i / block)] > 0 ? x[i] / ref.scales[Math.floor(i / block)] : 0;
        const nearTie = Math.abs(Math.abs(quotient % 1) - 0.5) < 1e-4;
        ok(q[i] === ref.q[i] || (nearTie && Math.abs(q[i] - ref.q[i]) === 1), `${at}: q ${q[i]} vs ${ref.q[i]}`);
        const sb = s[Math.floor(i / block)];
        equal(y[i], Math.fround(q[i] * sb), `${at}: y = q·s`);
        ok(Math.abs(y[i] - x[i]) <= sb / 2 * (1 + 1e-5) + 1e-30, `${at}: |x − y| ≤ s/2`);
      }
      equal(comp.wireBytes(n), 4 * Math.ceil(n / 4) + 4 * Math.ceil(n / block));
    }
  }
  // Ties go to even: 127 fixes the scale at 1, so the quotients are the values themselves.
  const { parts } = await roundTrip(gpu, int8Compressor(32), Float32Array.of(127, 2.5, 3.5, -2.5, 0.5, -127, 1e-3));
  ok(Array.from(unpackInt8(parts[0] as Uint32Array, 7)).every((v, i) => v === [127, 2, 4, -2, 0, -127, 0][i]));
});

gpuTest('sign: bits exactly (0 and −0 send +), scale ‖x‖₂/√n, decoded ±scale', async (gpu) => {
  for (const n of SIZES) {
    const host = sample(n, 5 * n);
    const { parts, y } = await roundTrip(gpu, signCompressor, host);
    const ref = signRef(Float64Array.from(host));
    const signs = unpackSigns(parts[0] as Uint32Array, n);
    for (let i = 0; i < n; i++) equal(signs[i], ref.signs[i], `n=${n} [${i}] x=${host[i]}`);
    const last = (parts[0] as Uint32Array)[parts[0].length - 1];
    equal(n % 32 ? last >>> (n % 32) : 0, 0, 'the last word has no stray bits');
    const s = parts[1][0];
    ok(Math.abs(s - ref.scale) <= 1e-5 * ref.scale, `n=${n}: scale ${s} vs ${ref.scale}`);
    for (let i = 0; i < n; i++) equal(y[i], signs[i] * s, `n=${n} decoded [${i}]`);
    equal(signCompressor.wireBytes(n), 4 * Math.ceil(n / 32) + 4);
  }
});

gpuTest('error feedback: x + e_old = D(c) + e_new each step, Σ D(c) + e = Σ x over steps', async (gpu) => {
  const n = 1000, steps = 30;
  const drift = randn(n, 99); // a fixed component, so Σ x grows and dropped parts would pile up
  for (const comp of [int8Compressor(64), signCompressor, topKCompressor({ density: 0.05 }), bf16Compressor]) {
    const ef = new ErrorFeedback(comp);
    const c = comp.allocate(gpu, n), d = gpu.empty([n]), x = gpu.empty([n]);
    const sumX = new Float64Array(n), sumD = new Float64Array(n), sumPlain = new Float64Array(n);
    let eOld = new Float64Array(n);
    for (let t = 0; t < steps; t++) {
      const host = Float32Array.from(randn(n, 1000 + t), (v, i) => 0.3 * drift[i] + v);
      gpu.write(x, host);
      ef.compress(gpu, 'w', x, c, d);
      const dec = await gpu.read(d), e = Float64Array.from(await gpu.read(ef.residual('w')!));
      for (let i = 0; i < n; i++) {
        const lhs = host[i] + eOld[i], rhs = dec[i] + e[i];
        const tol = 2.4e-7 * (Math.abs(host[i]) + Math.abs(eOld[i]) + Math.abs(e[i]));
        ok(Math.abs(lhs - rhs) <= tol, `${comp.name} step ${t} [${i}]: ${lhs} vs ${rhs}`);
        sumX[i] += host[i];
        sumD[i] += dec[i];
      }
      eOld = e;
      comp.compress(gpu, x, c); // without error feedback, for comparison
      comp.decompress(gpu, c, d);
      (await gpu.read(d)).forEach((v, i) => (sumPlain[i] += v));
    }
    const norm = (v: ArrayLike<number>) => Math.sqrt(Array.from(v).reduce((s, a) => s + a * a, 0));
    const gap = norm(sumX.map((v, i) => v - sumD[i] - eOld[i]));
    ok(gap <= 1e-5 * norm(sumX), `${comp.name}: Σx − ΣD − e = ${gap}`);
    const tracked = norm(sumX.map((v, i) => v - sumD[i])) / norm(sumX);
    const plain = norm(sumX.map((v, i) => v - sumPlain[i])) / norm(sumX);
    ok(tracked < 0.3 && tracked <= plain + 1e-6, `${comp.name}: ΣD tracks Σx (${tracked}; without EF ${plain})`);
    releaseCompressed(c);
    ef.release();
    d.release();
    x.release();
  }
});

gpuTest('compressors refuse bad block sizes, mismatched messages and reused residual names', (gpu) => {
  for (const b of [16, 48, 8192]) throws(() => int8Compressor(b), /block size must be one of 32, 64, .*4096.*got/);
  const c = int8Compressor(32).allocate(gpu, 100);
  throws(() => int8Compressor(32).compress(gpu, gpu.zeros([10]), c), /message of 100 values, tensor has 10/);
  throws(
    () => int8Compressor(64).decompress(gpu, c, gpu.zeros([100])),
    /scales must be f32 of 2 elements, got f32 \[4\]/,
  );
  throws(() => signCompressor.compress(gpu, gpu.zeros([100]), c), /bits must be u32 of 4 elements, got u32 \[25\]/);
  throws(() => bf16Compressor.allocate(gpu, 0), /n must be a positive integer, got 0/);
  const ef = new ErrorFeedback(int8Compressor(32));
  ef.compress(gpu, 'w', gpu.zeros([100]), c);
  throws(() => ef.compress(gpu, 'w', gpu.zeros([10]), c), /tensor 'w' had 100 elements, now 10/);
  ef.release();
  releaseCompressed(c);
});
