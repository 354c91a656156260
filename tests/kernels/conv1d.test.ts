import { gpuTest } from '../util/gpu.ts';
import { assertClose, assertFiniteDiff, assertRelRms, assertThrows, dot, f64, randn } from '../util/assert.ts';
import { conv1dBackward, type Conv1dDims, conv1dForward } from '../../src/kernels/conv1d.ts';
import { conv1dBackwardRef, conv1dRef } from '../../src/reference/conv1d.ts';

Deno.test('conv1d reference backward matches finite differences (x, w, bias)', () => {
  for (const c of [{ b: 2, t: 5, d: 3, k: 4 }, { b: 1, t: 2, d: 2, k: 4 }, { b: 2, t: 4, d: 3, k: 1 }]) {
    const n = c.b * c.t * c.d;
    const x = randn(n, 1), w = randn(c.d * c.k, 2), bias = randn(c.d, 3), dy = randn(n, 4);
    const g = conv1dBackwardRef(x, w, dy, c);
    assertFiniteDiff((v) => dot(conv1dRef(v, w, bias, c), dy), x, g.dx, 'dx');
    assertFiniteDiff((v) => dot(conv1dRef(x, v, bias, c), dy), w, g.dw, 'dw');
    assertFiniteDiff((v) => dot(conv1dRef(x, w, v, c), dy), bias, g.dbias, 'dbias');
  }
});

Deno.test('conv1d reference is the direct causal sum', () => {
  // k = 2: y_t = bias + w0·x_{t−1} + w1·x_t on one channel.
  const y = conv1dRef(Float64Array.from([1, 2, 3]), Float64Array.from([10, 100]), Float64Array.from([0.5]), {
    b: 1,
    t: 3,
    d: 1,
    k: 2,
  });
  assertClose(y, [100.5, 210.5, 320.5], 'k=2 by hand', 0, 0);
});

const CASES: Conv1dDims[] = [
  { b: 1, t: 1, d: 1, k: 4 }, // T < K
  { b: 2, t: 3, d: 7, k: 4 }, // T < K
  { b: 2, t: 17, d: 33, k: 4 },
  { b: 3, t: 113, d: 7, k: 1 },
  { b: 1, t: 257, d: 5, k: 4 }, // B·T over one 128-row block: several partials
  { b: 3, t: 130, d: 2, k: 3 },
];

for (const c of CASES) {
  gpuTest(`conv1d GPU vs reference b=${c.b} t=${c.t} d=${c.d} k=${c.k}`, async (gpu) => {
    const n = c.b * c.t * c.d;
    const x = randn(n, 11 + n), w = randn(c.d * c.k, 12), bias = randn(c.d, 13), dy = randn(n, 14);
    const tx = gpu.upload(Float32Array.from(x), [c.b, c.t, c.d]);
    const tw = gpu.upload(Float32Array.from(w), [c.d, c.k]);
    const tb = gpu.upload(Float32Array.from(bias), [c.d]);
    const tdy = gpu.upload(Float32Array.from(dy), [c.b, c.t, c.d]);
    const y = gpu.empty([c.b, c.t, c.d]);
    conv1dForward(gpu, tx, tw, tb, y, c);
    assertClose(await gpu.read(y), conv1dRef(x, w, bias, c), 'y');

    // Gradients accumulate onto non-zero buffers.
    const dx0 = randn(n, 15), dw0 = randn(c.d * c.k, 16), db0 = randn(c.d, 17);
    const dx = gpu.upload(Float32Array.from(dx0), [c.b, c.t, c.d]);
    const dw = gpu.upload(Float32Array.from(dw0), [c.d, c.k]);
    const db = gpu.upload(Float32Array.from(db0), [c.d]);
    conv1dBackward(gpu, tx, tw, tdy, dx, dw, db, c);
    const g = conv1dBackwardRef(x, w, dy, c);
    const plus = (a: Float64Array, b: Float64Array) => a.map((v, i) => v + b[i]);
    for (
      const [name, t, ref] of [['dx', dx, plus(g.dx, dx0)], ['dw', dw, plus(g.dw, dw0)], [
        'dbias',
        db,
        plus(g.dbias, db0),
      ]] as const
    ) {
      const got = f64(await gpu.read(t));
      assertClose(got, ref, name);
      assertRelRms(got, ref, name);
    }
    for (const t of [tx, tw, tb, tdy, y, dx, dw, db]) t.release();
  });
}

gpuTest('conv1d rejects bad shapes and aliasing', async (gpu) => {
  const c = { b: 1, t: 4, d: 2, k: 4 };
  const x = gpu.zeros([1, 4, 2]), w = gpu.zeros([2, 4]), bias = gpu.zeros([2]);
  assertThrows(() => conv1dForward(gpu, x, w, bias, gpu.zeros([1, 4, 3]), c), 'y has shape');
  assertThrows(() => conv1dForward(gpu, x, w, bias, x, c), 'share one GPUBuffer');
  assertThrows(() => conv1dForward(gpu, x, w, bias, gpu.zeros([1, 4, 2]), { ...c, k: 0 }), 'dims.k');
  assertThrows(() => conv1dForward(gpu, x, w, bias, gpu.zeros([1, 4, 2]), { ...c, t: 2.5 }), 'dims.t');
  await gpu.sync();
});
