// The GPU path of matmul (shaders/matmul_tiled*.wgsl), forced on the CPU adapter so CI checks it against the f64
// reference even where no GPU exists: each tile in both variants, workgroup memory and subgroups (the latter where the
// adapter has them: Dawn on SwiftShader, subgroups of 4; not Deno's wgpu on lavapipe).
import { gpuTest, testBackend } from '../util/gpu.ts';
import { assertClose, assertRelRms, randn } from '../util/assert.ts';
import {
  LARGE_TILE_WORKGROUP_BYTES,
  matmul,
  matmulTile,
  matmulTuning,
  subgroupMatmul,
} from '../../src/kernels/matmul.ts';
import { Gpu } from '../../src/gpu/context.ts';
import { equal } from 'node:assert/strict';
import { matmulRef } from '../../src/reference/matmul.ts';
import { Tensor } from '../../src/gpu/tensor.ts';
import { dispatchedKeys, subgroupTest, subgroupVariantTest } from '../util/row_variants.ts';

const LAYOUTS = [[false, false], [false, true], [true, false], [true, true]] as const;

/** (M, N, K) with sizes that are not multiples of 4, 16 or the tiles, and a partial K step (K < 16, K = 17). */
const SHAPES = [[1, 1, 1], [7, 65, 63], [65, 7, 127], [130, 66, 17], [64, 64, 64], [257, 131, 35], [1, 130, 7]];

for (const tile of [64, 128] as const) {
  await subgroupVariantTest(
    `matmul GPU path (shared-memory ${tile}² tiles): every layout, ragged sizes, alpha/beta, slices`,
    matmulTuning,
    'workgroup memory',
    async (gpu) => {
      Object.assign(matmulTuning, { forceTiled: true, tile });
      for (const [transA, transB] of LAYOUTS) {
        for (const [m, n, k] of SHAPES) {
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
            const what = `tiled ${transA ? 'T' : 'N'}${transB ? 'T' : 'N'} ${m}×${n}×${k} α=${alpha} β=${beta}`;
            const got = await gpu.read(tc);
            assertClose(got, ref, what);
            assertRelRms(got, ref, what);
            for (const t of [big, tb, tc]) t.release();
          }
        }
      }
    },
    () => Object.assign(matmulTuning, { forceTiled: false, tile: 0 }),
  );
}

// Both variants add the same products in the same order (k ascending, one fma each), whatever the subgroup size: the
// shuffle only changes where op(A) comes from. So they agree bit for bit, which a wrong lane would break even where it
// stayed within the tolerances.
await subgroupTest('matmul: the subgroup variants equal the workgroup-memory ones bit for bit', async (gpu) => {
  const [m, n, k] = [130, 67, 45];
  const a = gpu.upload(Float32Array.from(randn(m * k, 5)), [m, k]);
  const b = gpu.upload(Float32Array.from(randn(k * n, 6)), [k, n]);
  Object.assign(matmulTuning, { forceTiled: true });
  try {
    for (const tile of [64, 128] as const) {
      matmulTuning.tile = tile;
      const out: Float32Array[] = [];
      for (const subgroups of [false, true]) {
        matmulTuning.subgroups = subgroups;
        const c = gpu.empty([m, n]);
        const keys = await dispatchedKeys(gpu, () => matmul(gpu, a, b, c, m, n, k));
        if (keys.length !== 1 || keys[0].endsWith('.sg') !== subgroups) throw new Error(`dispatched ${keys}`);
        out.push(await gpu.read(c) as Float32Array);
        c.release();
      }
      const diff = out[0].findIndex((v, i) => !Object.is(v, out[1][i]));
      if (diff >= 0) throw new Error(`${tile}² tile: element ${diff}: ${out[0][diff]} vs ${out[1][diff]} (subgroups)`);
    }
  } finally {
    Object.assign(matmulTuning, { forceTiled: false, tile: 0, subgroups: true });
    a.release();
    b.release();
  }
});

gpuTest('matmul: subgroup variants exactly where the adapter has subgroups, never for f16 operands', (gpu) => {
  const has = gpu.features.has('subgroups');
  equal(subgroupMatmul(gpu), has);
  // f16 × subgroups runs on no adapter the tests reach (lavapipe lacks subgroups, SwiftShader shader-f16), so it is
  // refused: f16 operands keep the workgroup-memory kernels.
  equal(subgroupMatmul(gpu, 'f16', 'f32'), false);
  equal(subgroupMatmul(gpu, 'f32', 'f16'), false);
  matmulTuning.subgroups = false;
  try {
    equal(subgroupMatmul(gpu), false, 'matmulTuning.subgroups = false forces the fallback');
  } finally {
    matmulTuning.subgroups = true;
  }
});

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
