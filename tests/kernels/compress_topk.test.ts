/**
 * Top-k sparsification (src/kernels/compress/topk.ts) against the f64 reference, exactly: the
 * selected indices (ties to the lower index, in index order), their values and the dense
 * scatter, on ragged sizes, with many ties (values on a coarse grid, ± pairs of one magnitude),
 * k from 1 to n, and n large enough for several histogram workgroups and chunks. Bad k and
 * sizes are refused.
 */
import { deepEqual, equal, throws } from 'node:assert/strict';
import { gpuTest } from '../util/gpu.ts';
import { randn } from '../util/assert.ts';
import type { Gpu } from '../../src/gpu/context.ts';
import { topKCompressor, topKCount, topKScatter, topKSelect } from '../../src/kernels/compress/index.ts';
import { topKRef } from '../../src/reference/compress.ts';

async function check(gpu: Gpu, host: Float32Array, k: number, what: string): Promise<void> {
  const n = host.length;
  const x = gpu.upload(host, [n]), idx = gpu.empty([k], 'u32'), val = gpu.empty([k]), y = gpu.empty([n]);
  topKSelect(gpu, x, idx, val);
  topKScatter(gpu, idx, val, y);
  const ref = topKRef(Float64Array.from(host), k);
  deepEqual(Array.from(await gpu.read(idx)), Array.from(ref.indices), `${what}: indices`);
  deepEqual(Array.from(await gpu.read(val)), Array.from(ref.values), `${what}: values`);
  deepEqual(Array.from(await gpu.read(y)), Array.from(ref.y), `${what}: scatter`);
  for (const t of [x, idx, val, y]) t.release();
}

gpuTest('top-k equals the reference on ragged sizes, for k from 1 to n', async (gpu) => {
  for (const n of [1, 7, 257, 1000, 4099]) {
    const host = Float32Array.from(randn(n, n), (v, i) => v * 2 ** ((i * 13) % 11 - 5));
    for (const k of new Set([1, 2, Math.ceil(n / 10), n - 1, n].filter((k) => k >= 1 && k <= n))) {
      await check(gpu, host, k, `n=${n} k=${k}`);
    }
  }
});

gpuTest('top-k breaks ties by the lower index, across chunks and histogram workgroups', async (gpu) => {
  // Magnitudes on a grid of 8 levels: every threshold falls inside a run of equal keys.
  for (const n of [257, 4099, 100_003]) {
    const host = Float32Array.from(randn(n, 7 * n), (v) => Math.round(v * 4) / 4);
    for (const k of [1, 3, Math.ceil(n / 3), Math.ceil(n / 2)]) await check(gpu, host, k, `ties n=${n} k=${k}`);
  }
  // ± pairs and zeros: |−0.5| ties with |0.5|; all-zero input selects the first k indices.
  await check(gpu, Float32Array.of(0.5, -0.5, 0, -0.5, 0.5, 0.25), 3, '± pairs');
  await check(gpu, new Float32Array(70), 5, 'all zeros');
});

gpuTest('top-k compressor: k from a count or a density, wire bytes 8k; bad k refused', (gpu) => {
  equal(topKCount(1000, { density: 0.01 }), 10);
  equal(topKCount(3, { density: 0.01 }), 1, 'at least one value');
  equal(topKCompressor({ density: 0.1 }).wireBytes(1000), 800);
  const c = topKCompressor({ k: 5 }).allocate(gpu, 20);
  equal(c.parts[0].size, 5);
  throws(() => topKCompressor({ k: 5 }).allocate(gpu, 4), /k must be an integer in \[1, n = 4\], got 5/);
  throws(() => topKCompressor({ k: 0 }).allocate(gpu, 4), /k must be an integer in \[1, n = 4\], got 0/);
  throws(() => topKCompressor({ density: 0 }), /density must be in \(0, 1\], got 0/);
  throws(() => topKCompressor({ density: 1.5 }), /density must be in \(0, 1\]/);
  throws(
    () => topKSelect(gpu, gpu.zeros([3]), gpu.empty([4], 'u32'), gpu.empty([4])),
    /k must be in \[1, n = 3\], got 4/,
  );
  throws(() => topKSelect(gpu, gpu.zeros([9]), gpu.empty([4], 'u32'), gpu.empty([3])), /values must be f32 of 4/);
  throws(() => topKCompressor({ k: 5 }).compress(gpu, gpu.zeros([21]), c), /message of 20 values, tensor has 21/);
  for (const t of c.parts) t.release();
});
