/**
 * PowerSGD (src/kernels/compress/powersgd.ts) against the f64 reference: P = M·Q, the
 * Gram–Schmidt orthogonalisation (P̂ᵀP̂ = I, P̂ equal to the reference's), Q = Mᵀ·P̂ and the
 * approximation P̂·Qᵀ within the f32 bounds of docs/design.md#test-tolerances, on ragged matrices, over two steps
 * (the warm-started Q carried); a matrix of rank ≤ r is reproduced; error feedback keeps
 * Σ D + e = Σ g; bad ranks and sizes are refused.
 */
import { equal, ok, throws } from 'node:assert/strict';
import { gpuTest } from '../util/gpu.ts';
import { assertClose, randn } from '../util/assert.ts';
import { orthogonalise, PowerSgd, powerSgdInitialQ } from '../../src/kernels/compress/index.ts';
import { orthogonaliseRef, powerSgdRef } from '../../src/reference/compress.ts';

const f64 = (a: ArrayLike<number>) => Float64Array.from(a);

gpuTest('PowerSGD steps equal the reference on ragged matrices, two warm-started steps', async (gpu) => {
  for (const [rows, cols, rank] of [[7, 5, 1], [7, 5, 2], [7, 5, 5], [65, 33, 4], [33, 65, 4], [300, 17, 3]]) {
    const what = `${rows}×${cols} rank ${rank}`;
    const ps = new PowerSgd(gpu, rows, cols, rank, { seed: rows + cols });
    equal(ps.wireBytes(), 4 * rank * (rows + cols));
    let q: Float64Array = f64(powerSgdInitialQ(cols, rank, rows + cols));
    deepClose(await gpu.read(ps.q), q, `${what}: initial Q`);
    let e = new Float64Array(rows * cols);
    const out = gpu.empty([rows, cols]);
    for (let step = 0; step < 2; step++) {
      const g = randn(rows * cols, 31 * step + rows);
      const m = e.map((v, i) => v + g[i]);
      const gt = gpu.upload(Float32Array.from(g), [rows, cols]);
      ps.stepP(gpu, gt);
      const p = await gpu.read(ps.p);
      const pRef = new Float64Array(rows * rank);
      for (let r = 0; r < rows; r++) {
        for (let j = 0; j < rank; j++) {
          for (let c = 0; c < cols; c++) pRef[r * rank + j] += m[r * cols + c] * q[c * rank + j];
        }
      }
      assertClose(p, pRef, `${what} step ${step}: P = M·Q`);
      ps.stepQ(gpu);
      ps.decompress(gpu, out);
      const ref = powerSgdRef(m, q, rows, cols, rank);
      const ph = await gpu.read(ps.p);
      assertClose(ph, ref.p, `${what} step ${step}: P̂`, 1e-4, 1e-3);
      assertOrthonormal(ph, rows, rank, what);
      assertClose(await gpu.read(ps.q), ref.q, `${what} step ${step}: Q = Mᵀ·P̂`);
      assertClose(await gpu.read(out), ref.d, `${what} step ${step}: P̂·Qᵀ`);
      e = m.map((v, i) => v - ref.d[i]);
      assertClose(await gpu.read(ps.residual), e, `${what} step ${step}: residual M − D`);
      q = ref.q;
      gt.release();
    }
    out.release();
    ps.release();
  }
});

function deepClose(got: ArrayLike<number>, want: ArrayLike<number>, what: string): void {
  assertClose(got, want, what, 0, 0);
}

function assertOrthonormal(p: ArrayLike<number>, rows: number, rank: number, what: string): void {
  for (let a = 0; a < rank; a++) {
    for (let b = 0; b < rank; b++) {
      let s = 0;
      for (let r = 0; r < rows; r++) s += p[r * rank + a] * p[r * rank + b];
      ok(Math.abs(s - (a === b ? 1 : 0)) < 1e-5, `${what}: P̂ᵀP̂[${a},${b}] = ${s}`);
    }
  }
}

gpuTest('PowerSGD reproduces a matrix of rank ≤ r; error feedback keeps Σ D + e = Σ g', async (gpu) => {
  const [rows, cols, rank] = [65, 33, 3];
  const a = randn(rows * 2, 1), b = randn(cols * 2, 2);
  const low = Float32Array.from({ length: rows * cols }, (_, i) => {
    const r = Math.floor(i / cols), c = i % cols;
    return a[2 * r] * b[2 * c] + a[2 * r + 1] * b[2 * c + 1];
  });
  const ps = new PowerSgd(gpu, rows, cols, rank, { seed: 5 });
  const g = gpu.upload(low, [rows, cols]), out = gpu.empty([rows, cols]);
  ps.stepP(gpu, g);
  ps.stepQ(gpu);
  ps.decompress(gpu, out);
  assertClose(await gpu.read(out), f64(low), 'rank-2 matrix at rank 3', 1e-5, 1e-4);
  ps.release();

  const ef = new PowerSgd(gpu, rows, cols, 1, { seed: 6 });
  const sumG = new Float64Array(rows * cols), sumD = new Float64Array(rows * cols);
  for (let t = 0; t < 8; t++) {
    const host = Float32Array.from(randn(rows * cols, 40 + t));
    gpu.write(g, host);
    ef.stepP(gpu, g);
    ef.stepQ(gpu);
    ef.decompress(gpu, out);
    (await gpu.read(out)).forEach((v, i) => (sumD[i] += v));
    host.forEach((v, i) => (sumG[i] += v));
  }
  const e = await gpu.read(ef.residual);
  assertClose(sumD.map((v, i) => v + e[i]), sumG, 'Σ D + e = Σ g', 1e-4, 1e-5);
  ef.release();
  const plain = new PowerSgd(gpu, rows, cols, 1, { errorFeedback: false });
  plain.stepP(gpu, g);
  plain.stepQ(gpu);
  plain.decompress(gpu, out);
  ok((await gpu.read(plain.residual)).every((v) => v === 0), 'without error feedback no residual is kept');
  plain.release();
  g.release();
  out.release();
});

gpuTest('orthogonalise keeps a zero column at 0; bad ranks and sizes are refused', async (gpu) => {
  const p = gpu.upload(Float32Array.of(1, 0, 1, 0, 0, 0), [3, 2]);
  orthogonalise(gpu, p, 3, 2);
  assertClose(await gpu.read(p), orthogonaliseRef(Float64Array.of(1, 0, 1, 0, 0, 0), 3, 2), 'zero column', 1e-7, 1e-6);
  throws(() => new PowerSgd(gpu, 7, 5, 0), /rank must be an integer in \[1, min\(rows, cols\) = 5\], got 0/);
  throws(() => new PowerSgd(gpu, 7, 5, 6), /rank must be an integer in \[1, min\(rows, cols\) = 5\], got 6/);
  throws(() => new PowerSgd(gpu, 0, 5, 1), /rows must be a positive integer, got 0/);
  throws(() => orthogonalise(gpu, p, 3, 4), /needs 1 ≤ rank ≤ rows, got rows 3, rank 4/);
  throws(() => orthogonalise(gpu, p, 2, 2), /p must be f32 of 4 elements/);
  throws(() => orthogonalise(gpu, p, 300_000, 64), /over what one workgroup loops over/);
  const ps = new PowerSgd(gpu, 7, 5, 2);
  throws(() => ps.stepP(gpu, gpu.zeros([5, 7, 2])), /g must be f32 of 35 elements, got f32 \[5,7,2\]/);
  throws(() => ps.decompress(gpu, gpu.zeros([36])), /out must be f32 of 35 elements/);
  ps.release();
  p.release();
});
