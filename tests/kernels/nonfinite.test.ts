import { gpuTest } from '../util/gpu.ts';
import { assertThrows, randn } from '../util/assert.ts';
import { countNonFinite } from '../../src/kernels/reduce.ts';
import { countNonFiniteRef } from '../../src/reference/reduce.ts';
import { Tensor } from '../../src/gpu/tensor.ts';
import type { Gpu } from '../../src/gpu/context.ts';

/** NaN with other payloads than the canonical one: the kernel tests bits, not x != x. */
const NAN_BITS = [0x7fc00000, 0x7f800001, 0xffffffff, 0xffc00001];
const F32_MAX = 3.4028234663852886e38;

function nanWithBits(bits: number): number {
  const u = new Uint32Array([bits]);
  return new Float32Array(u.buffer)[0];
}

async function gpuCount(gpu: Gpu, xs: Tensor[]): Promise<number> {
  const count = gpu.zeros([1], 'u32', 'test.count');
  for (const x of xs) countNonFinite(gpu, x, count);
  const got = (await gpu.read(count))[0];
  count.release();
  return got;
}

gpuTest(
  'countNonFinite matches the reference on ragged sizes with NaN, +Inf, −Inf at edges and stride boundaries',
  async (gpu) => {
    // 4096 elements per workgroup-slot of the grid at one group; 65 536 invocations at the most.
    for (
      const n of [1, 2, 7, 255, 256, 257, 4095, 4096, 4097, 65_535, 65_536, 65_537, 1_048_576 + 5]
    ) {
      const groups = Math.max(1, Math.min(256, Math.ceil(n / 4096)));
      const stride = groups * 256;
      const x = Float32Array.from(randn(n, n));
      // Large but finite values, −0 and subnormals must not count.
      x[Math.floor(n / 3)] = F32_MAX;
      x[Math.floor(n / 5)] = -0;
      x[Math.floor(n / 7)] = 1e-45;
      const bad = [
        0,
        n - 1,
        255,
        256,
        stride - 1,
        stride,
        stride + 1,
        2 * stride - 1,
        Math.floor(n / 2),
      ].filter((i) => i < n);
      const values = [NaN, Infinity, -Infinity, ...NAN_BITS.map(nanWithBits)];
      bad.forEach((i, k) => (x[i] = values[k % values.length]));
      const t = gpu.upload(x, [n]);
      const got = await gpuCount(gpu, [t]);
      const want = countNonFiniteRef(x);
      if (got !== want) {
        throw new Error(`n=${n}: counted ${got} non-finite elements, expected ${want}`);
      }
      t.release();
    }
  },
);

gpuTest('countNonFinite counts a clean buffer as 0 and an all-NaN one as n', async (gpu) => {
  for (const n of [1, 300, 70_001]) {
    const clean = gpu.upload(Float32Array.from(randn(n, 3)), [n]);
    const nan = gpu.upload(new Float32Array(n).fill(NaN), [n]);
    const [a, b] = [await gpuCount(gpu, [clean]), await gpuCount(gpu, [nan])];
    if (a !== 0 || b !== n) {
      throw new Error(`n=${n}: clean ${a} (expected 0), all-NaN ${b} (expected ${n})`);
    }
    clean.release();
    nan.release();
  }
});

gpuTest(
  'countNonFinite on slices of a flat buffer counts only the slice, and accumulates over calls',
  async (gpu) => {
    const flat = new Float32Array(512).fill(Infinity); // every neighbour outside the slices is non-finite
    for (let i = 64; i < 64 + 77; i++) flat[i] = i;
    for (let i = 256; i < 256 + 130; i++) flat[i] = -i;
    flat[64] = NaN;
    flat[64 + 76] = -Infinity;
    flat[256 + 129] = NaN;
    const buf = gpu.upload(flat, [512]);
    const a = new Tensor(gpu, buf.buffer, [7, 11], 'f32', 64 * 4, false);
    const b = new Tensor(gpu, buf.buffer, [130], 'f32', 256 * 4, false);
    const got = await gpuCount(gpu, [a, b]);
    const want = countNonFiniteRef(flat.subarray(64, 64 + 77)) +
      countNonFiniteRef(flat.subarray(256, 256 + 130));
    if (got !== want || want !== 3) throw new Error(`counted ${got}, expected ${want} (3)`);
    buf.release();
  },
);

gpuTest('countNonFinite validates its tensors', async (gpu) => {
  const x = gpu.zeros([4], 'f32'),
    c = gpu.zeros([1], 'u32'),
    f = gpu.zeros([1], 'f32'),
    i = gpu.zeros([4], 'i32');
  assertThrows(() => countNonFinite(gpu, i, c), 'x must have dtype f32, got i32');
  assertThrows(() => countNonFinite(gpu, x, f), 'count must have dtype u32, got f32');
  const shared = new Tensor(gpu, x.buffer, [1], 'u32', 0, false);
  assertThrows(() => countNonFinite(gpu, x, shared), 'share one GPUBuffer');
  for (const t of [x, c, f, i]) t.release();
  await gpu.sync();
});
