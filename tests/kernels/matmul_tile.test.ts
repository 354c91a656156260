/**
 * The register-blocked CPU kernel with its tile cut to fewer row quads (src/kernels/matmul_cpu.ts
 * cutTile: 32×16 on SwiftShader, where the 64×16 tile costs seconds of compile per layout): every
 * cut checked against the f64 reference on ragged shapes in all four layouts, with K split, and the
 * choice of tile per driver.
 */
import { equal, throws } from 'node:assert/strict';
import { gpuTest } from '../util/gpu.ts';
import { check } from '../util/matmul_check.ts';
import { matmulTuning } from '../../src/kernels/matmul.ts';
import { cutTile, registerTile, rowQuads } from '../../src/kernels/matmul_cpu.ts';
import type { Gpu } from '../../src/gpu/context.ts';
import { softwareDriver } from '../../src/gpu/device.ts';

const LAYOUTS: [string, boolean, boolean][] = [['NN', false, false], ['NT', false, true], ['TN', true, false], [
  'TT',
  true,
  true,
]];

for (const quads of [8, 1]) {
  gpuTest(`matmul, register tile of ${quads * 4}×16: ragged shapes in every layout, split K`, async (gpu) => {
    Object.assign(matmulTuning, { forceRegister: true });
    registerTile.rowQuads = quads;
    try {
      // Rows across the cut tile's edge (4·quads ± 1) and a whole number of tiles; ragged N and K.
      const rows = [4 * quads - 1, 4 * quads + 1, 8 * quads];
      for (const [i, [name, transA, transB]] of LAYOUTS.entries()) {
        for (const [j, m] of rows.entries()) {
          const [n, k] = [[17, 65], [64, 7], [33, 130]][j];
          await check(gpu, m, n, k, { transA, transB, alpha: 1.5, beta: j % 2 }, 100 * i + j, `${name} ${m}×${n}×${k}`);
        }
      }
      await check(gpu, 9, 12, 2001, { transA: true, beta: 1 }, 7, 'split-K 9×12 K 2001');
    } finally {
      Object.assign(matmulTuning, { forceRegister: false });
      registerTile.rowQuads = 0;
    }
  });
}

Deno.test('matmul register tile: 32 rows on SwiftShader, the whole 64 elsewhere; bad cuts refused', () => {
  const on = (description: string, architecture = '') =>
    rowQuads({ softwareDriver: softwareDriver({ description, architecture }) } as Gpu);
  equal(on('SwiftShader Device (LLVM 10.0.0)'), 8);
  equal(on('', 'swiftshader'), 8, "a browser's masked adapter: the architecture alone");
  equal(on('llvmpipe (LLVM 15.0.6, 256 bits)'), 16);
  equal(on('NVIDIA H200', 'hopper'), 16);
  const code = 'struct Acc {\n  g0: Quad,\n}\n';
  throws(() => cutTile(code, 8), /no longer has the 16 written-out row quads/);
  throws(() => cutTile(code, 0), /0 row quads; allowed 1–16/);
  throws(() => cutTile(code, 17), /allowed 1–16/);
  equal(cutTile(code, 16), code, 'the whole tile is the shader as written');
});
