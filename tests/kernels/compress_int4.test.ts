/**
 * The int4 compressor (src/kernels/compress/int4.ts) against its f64 reference (int4Ref) on
 * ragged sizes — n < 8, n not a multiple of 8 or of the block, an all-zero block — and every
 * block size class: nibbles equal the reference's exactly (unless 7·x/absmax lies within 1e-4 of
 * a tie: GPU division is not correctly rounded), scales to f32 rounding, y = q·s bit for bit,
 * |x − y| ≤ s/2 per element, and the relative RMS error the reference's. n = 0 dispatches
 * nothing; bad blocks and mismatched messages are refused by name.
 */
import { equal, ok, throws } from 'node:assert/strict';
import { gpuTest } from '../util/gpu.ts';
import { randn } from '../util/assert.ts';
import type { Gpu } from '../../src/gpu/context.ts';
import {
  compressedBytes,
  dequantizeInt4,
  int4Compressor,
  quantizeInt4,
  releaseCompressed,
} from '../../src/kernels/compress/index.ts';
import { int4Ref, unpackInt4 } from '../../src/reference/compress.ts';

const SIZES = [1, 5, 7, 8, 9, 257, 1000, 4099];

/** Normal values over several binades, with an exact 0 and a −0 from n = 5. */
function sample(n: number, seed: number): Float32Array {
  return Float32Array.from(randn(n, seed), (v, i) => (i === 3 ? 0 : i === 4 ? -0 : v * 2 ** ((i * 37) % 9 - 4)));
}

/** x through the int4 compressor; q, scales and D(c) read back. */
async function roundTrip(gpu: Gpu, block: number, host: Float32Array) {
  const comp = int4Compressor(block), n = host.length;
  const x = gpu.upload(host, [n]), y = gpu.empty([n]), c = comp.allocate(gpu, n);
  comp.compress(gpu, x, c);
  comp.decompress(gpu, c, y);
  const [q, s] = await Promise.all(c.parts.map((t) => gpu.read(t)));
  const out = await gpu.read(y);
  equal(compressedBytes(c), comp.wireBytes(n), `${comp.name} n=${n}: wire bytes`);
  equal(comp.wireBytes(n), 4 * Math.ceil(n / 8) + 4 * Math.ceil(n / block), `${comp.name} n=${n}: the formula`);
  releaseCompressed(c);
  x.release();
  y.release();
  return { words: q as Uint32Array, scales: s, y: out };
}

const rms = (v: ArrayLike<number>) => Math.sqrt(Array.from(v).reduce((a, b) => a + b * b, 0) / Math.max(1, v.length));

gpuTest('int4 block-wise: nibbles, scales and dequantised values against the reference', async (gpu) => {
  for (const block of [32, 64, 256, 4096]) {
    for (const n of SIZES) {
      const host = sample(n, 7 * n + block);
      if (n > 128) host.fill(0, 64, 128); // an all-zero block for blocks 32 and 64
      const { words, scales: s, y } = await roundTrip(gpu, block, host);
      const x = Float64Array.from(host), ref = int4Ref(x, block), q = unpackInt4(words, n);
      const what = `int4:${block} n=${n}`;
      equal(words.length, Math.ceil(n / 8), `${what}: eight values per u32 word`);
      if (n % 8) equal(words[words.length - 1] >>> (4 * (n % 8)), 0, `${what}: the last word has no stray nibbles`);
      equal(s.length, ref.scales.length, `${what}: one scale per block`);
      for (let b = 0; b < ref.scales.length; b++) {
        ok(Math.abs(s[b] - ref.scales[b]) <= 1e-6 * ref.scales[b], `${what} scale ${b}: ${s[b]} vs ${ref.scales[b]}`);
      }
      if (n > 128 && block <= 64) {
        ok(s[64 / block] === 0 && y.subarray(64, 128).every((v) => v === 0), `${what}: zeros`);
      }
      let nearTies = 0;
      for (let i = 0; i < n; i++) {
        const at = `${what} [${i}] x=${x[i]}`, b = Math.floor(i / block);
        ok(q[i] >= -7 && q[i] <= 7, `${at}: q ${q[i]} in [−7, 7]`);
        const quotient = ref.scales[b] > 0 ? x[i] / ref.scales[b] : 0;
        const nearTie = Math.abs(Math.abs(quotient % 1) - 0.5) < 1e-4;
        if (q[i] !== ref.q[i]) nearTies++;
        ok(q[i] === ref.q[i] || (nearTie && Math.abs(q[i] - ref.q[i]) === 1), `${at}: q ${q[i]} vs ${ref.q[i]}`);
        equal(y[i], Math.fround(q[i] * s[b]), `${at}: y = q·s`);
        ok(Math.abs(y[i] - x[i]) <= s[b] / 2 * (1 + 1e-5) + 1e-30, `${at}: |x − y| ≤ s/2 = ${s[b] / 2}`);
      }
      const gpuRel = rms(y.map((v, i) => v - x[i])) / rms(x), refRel = rms(ref.y.map((v, i) => v - x[i])) / rms(x);
      const tol = 1e-5 + (nearTies ? 0.02 : 0);
      ok(Math.abs(gpuRel - refRel) <= tol * Math.max(refRel, 1e-30), `${what}: relative RMS ${gpuRel} vs ${refRel}`);
      if (n >= 257) ok(refRel > 0.01 && refRel < 0.2, `${what}: relative RMS ${refRel} is a 4-bit code's`);
    }
  }
  // 7 fixes the scale at 1, so the quotients are the values themselves: ties go to even.
  const { words, y } = await roundTrip(gpu, 32, Float32Array.of(7, 2.5, 3.5, -2.5, 0.5, -7, 1e-3, -1.5, 6.5));
  const want = [7, 2, 4, -2, 0, -7, 0, -2, 6];
  ok(Array.from(unpackInt4(words, 9)).every((v, i) => v === want[i]), `ties to even: ${unpackInt4(words, 9)}`);
  ok(Array.from(y).every((v, i) => v === want[i]), `decoded ${y}`);
  equal(words[0], 0xe090e427, 'nibble j of word 0 holds element j, two’s complement');
  equal(words[1], 0x6, 'element 8 alone in word 1');
});

gpuTest('int4: n = 0 dispatches nothing; bad blocks, sizes and messages are refused', (gpu) => {
  const empty = () => gpu.empty([0], 'f32');
  quantizeInt4(gpu, empty(), gpu.empty([0], 'u32'), empty(), 256);
  dequantizeInt4(gpu, gpu.empty([0], 'u32'), empty(), empty(), 256);
  for (const b of [0, 16, 48, 8192]) {
    throws(() => int4Compressor(b), /int4: block size must be one of 32, 64, .*4096.*got/);
  }
  throws(() => int4Compressor().allocate(gpu, 0), /int4.allocate: n must be a positive integer, got 0/);
  const c = int4Compressor(32).allocate(gpu, 100);
  equal(c.parts[0].size, 13);
  throws(() => int4Compressor(32).compress(gpu, gpu.zeros([10]), c), /message of 100 values, tensor has 10/);
  throws(
    () => int4Compressor(64).decompress(gpu, c, gpu.zeros([100])),
    /scales must be f32 of 2 elements, got f32 \[4\]/,
  );
  throws(
    () => quantizeInt4(gpu, gpu.zeros([100]), gpu.empty([25], 'u32'), gpu.empty([4]), 32),
    /quantizeInt4: q must be u32 of 13 elements, got u32 \[25\]/,
  );
  releaseCompressed(c);
});
