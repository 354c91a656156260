// The GPU path of matmul (shaders/matmul_tiled.wgsl and matmul_tiled_128.wgsl), forced on the CPU adapter so CI checks
// it against the f64 reference even where no GPU exists.
import { gpuTest } from '../util/gpu.ts';
import { assertClose, randn } from '../util/assert.ts';
import { matmul, matmulTuning } from '../../src/kernels/matmul.ts';
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
