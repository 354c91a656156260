// The GPU path of matmul (shaders/matmul_tiled.wgsl and matmul_tiled_128.wgsl), forced on the CPU adapter so CI checks
// it against the f64 reference even where no GPU exists.
import { gpuTest, testBackend } from '../util/gpu.ts';
import { assertClose, randn } from '../util/assert.ts';
import { LARGE_TILE_WORKGROUP_BYTES, matmul, matmulTile, matmulTuning } from '../../src/kernels/matmul.ts';
import { Gpu } from '../../src/gpu/context.ts';
import { equal } from 'node:assert/strict';
import { matmulRef } from '../../src/reference/matmul.ts';
import { Tensor } from '../../src/gpu/tensor.ts';

const LAYOUTS = [[false, false], [false, true], [true, false], [true, true]] as const;

for (const tile of [64, 128] as const) {
  gpuTest(
    `matmul GPU path (shared-memory ${tile}² tiles): every layout, ragged sizes, alpha/beta, slices`,
    async (gpu) => {
      Object.assign(matmulTuning, { forceTiled: true, tile });
      try {
        for (const [transA, transB] of LAYOUTS) {
          for (const [m, n, k] of [[1, 1, 1], [7, 65, 63], [65, 7, 127], [130, 66, 17], [64, 64, 64], [257, 131, 35]]) {
            for (const [alpha, beta] of [[1, 0], [0.5, 1]]) {
              const a = randn(m * k, m + n + k), b = randn(k * n, 3 * m + k), c0 = randn(m * n, 7 + n);
              // A as a slice at a non-zero offset inside a bigger buffer.
              const big = gpu.upload(new Float32Array(64 + m * k).fill(NaN).map((v, i) => (i >= 64 ? a[i - 64] : v)), [
                64 + m * k,
              ]);
              const ta = new Tensor(gpu, big.buffer, transA ? [k, m] : [m, k], 'f32', 256, false);
              const tb = gpu.upload(Float32Array.from(b), transB ? [n, k] : [k, n]);
              const tc = gpu.upload(beta ? Float32Array.from(c0) : new Float32Array(m * n).fill(NaN), [m, n]);
              matmul(gpu, ta, tb, tc, m, n, k, { transA, transB, alpha, beta });
              const ref = matmulRef(a, b, m, n, k, { transA, transB, alpha, beta, c: c0 });
              assertClose(
                await gpu.read(tc),
                ref,
                `tiled ${transA ? 'T' : 'N'}${transB ? 'T' : 'N'} ${m}×${n}×${k} α=${alpha} β=${beta}`,
              );
              for (const t of [big, tb, tc]) t.release();
            }
          }
        }
      } finally {
        Object.assign(matmulTuning, { forceTiled: false, tile: 0 });
      }
    },
  );
}

Deno.test({
  name: 'matmul tile choice: 128² from 128 output blocks when the workgroup memory holds its tiles, else 64²',
  sanitizeResources: false,
  sanitizeOps: false,
  fn: async () => {
    const big = await Gpu.create({ backend: testBackend() });
    const small = await Gpu.create({
      backend: testBackend(),
      maxLimits: { maxComputeWorkgroupStorageSize: LARGE_TILE_WORKGROUP_BYTES - 512 },
    });
    try {
      if (big.device.limits.maxComputeWorkgroupStorageSize < LARGE_TILE_WORKGROUP_BYTES) {
        throw new Error('this adapter offers too little workgroup memory to test the 128² choice');
      }
      equal(matmulTile(big, 2048, 2048), 128);
      equal(matmulTile(big, 1024, 1024), 64, '64 blocks of 128² do not fill a large GPU');
      equal(matmulTile(big, 4096, 512), 128);
      equal(matmulTile(small, 2048, 2048), 64, 'a device with the default 16 KiB keeps the 64² tile');
      // On that device the product still runs (the tiled path forced on CPU adapters) and is right.
      matmulTuning.forceTiled = true;
      const [m, n, k] = [1536, 1536, 3];
      const a = randn(m * k, 11), b = randn(k * n, 12);
      const ta = small.upload(Float32Array.from(a), [m, k]), tb = small.upload(Float32Array.from(b), [k, n]);
      const tc = small.empty([m, n]);
      matmul(small, ta, tb, tc, m, n, k);
      assertClose(await small.read(tc), matmulRef(a, b, m, n, k), 'tiled on a 16 KiB device');
    } finally {
      matmulTuning.forceTiled = false;
      big.destroy();
      small.destroy();
    }
  },
});
