import { gpuTest } from '../util/gpu.ts';
import { assertClose, assertFiniteDiff, assertRelRms, assertThrows, dot, randn } from '../util/assert.ts';
import * as K from '../../src/kernels/activations.ts';
import * as R from '../../src/reference/activations.ts';
import type { Gpu } from '../../src/gpu/context.ts';
import type { Tensor } from '../../src/gpu/tensor.ts';

const f32 = (a: Float64Array) => Float32Array.from(a);
const TAU = 0.1; // the strong decay of docs/design.md#kernel-references-and-test-cases: g = logσ(x)/0.1

/** The elementwise activations: GPU forward/backward with their f64 references. */
const UNARY: {
  name: string;
  fwd: (gpu: Gpu, x: Tensor, y: Tensor) => void;
  bwd: (gpu: Gpu, x: Tensor, dy: Tensor, dx: Tensor) => void;
  ref: (x: Float64Array) => Float64Array;
  bref: (x: Float64Array, dy: Float64Array) => Float64Array;
}[] = [
  { name: 'silu', fwd: K.siluForward, bwd: K.siluBackward, ref: R.siluRef, bref: R.siluBackwardRef },
  { name: 'sigmoid', fwd: K.sigmoidForward, bwd: K.sigmoidBackward, ref: R.sigmoidRef, bref: R.sigmoidBackwardRef },
  {
    name: 'relu²',
    fwd: K.reluSquaredForward,
    bwd: K.reluSquaredBackward,
    ref: R.reluSquaredRef,
    bref: R.reluSquaredBackwardRef,
  },
  {
    name: 'softplus',
    fwd: K.softplusForward,
    bwd: K.softplusBackward,
    ref: R.softplusRef,
    bref: R.softplusBackwardRef,
  },
  {
    name: 'logsigmoid/τ',
    fwd: (gpu, x, y) => K.logSigmoidForward(gpu, x, y, 1 / TAU),
    bwd: (gpu, x, dy, dx) => K.logSigmoidBackward(gpu, x, dy, dx, 1 / TAU),
    ref: (x) => R.logSigmoidRef(x, 1 / TAU),
    bref: (x, dy) => R.logSigmoidBackwardRef(x, dy, 1 / TAU),
  },
];

const SHAPES: [number, number][] = [];
for (const n of [1, 7, 65]) for (const c of [1, 13, 64, 257]) SHAPES.push([n, c]);

Deno.test('activation references: backward matches finite differences', () => {
  const x = randn(40, 1, -5, 5).map((v) => (Math.abs(v) < 1e-3 ? 0.5 : v)); // relu² kink away from 0
  const dy = randn(40, 2);
  for (const u of UNARY) assertFiniteDiff((v) => dot(u.ref(v), dy), x, u.bref(x, dy), u.name);
  const a = randn(24, 3), b = randn(24, 4), mu = randn(6, 5, 0, 1), s = randn(6, 6);
  const m = R.mulBackwardRef(a, b, dy.subarray(0, 24));
  assertFiniteDiff((v) => dot(R.mulRef(v, b), dy), a, m.da, 'mul da');
  assertFiniteDiff((v) => dot(R.mulRef(a, v), dy), b, m.db, 'mul db');
  const l = R.lerpBackwardRef(a, b, mu, dy.subarray(0, 24));
  assertFiniteDiff((v) => dot(R.lerpRef(v, b, mu), dy), a, l.da, 'lerp da');
  assertFiniteDiff((v) => dot(R.lerpRef(a, v, mu), dy), b, l.db, 'lerp db');
  assertFiniteDiff((v) => dot(R.lerpRef(a, b, v), dy), mu, l.dmu, 'lerp dμ');
  const sc = R.scaleChannelsBackwardRef(a, s, dy.subarray(0, 24));
  assertFiniteDiff((v) => dot(R.scaleChannelsRef(v, s), dy), a, sc.dx, 'scale dx');
  assertFiniteDiff((v) => dot(R.scaleChannelsRef(a, v), dy), s, sc.ds, 'scale ds');
  // (B, T, C) = (2, 3, 4)
  assertFiniteDiff(
    (v) => dot(R.tokenShiftRef(v, 2, 3, 4), dy),
    a,
    R.tokenShiftBackwardRef(dy.subarray(0, 24), 2, 3, 4),
    'shift dx',
  );
});

/** Reads a gradient pre-filled with `fill`; checks it elementwise and by relative RMS of the gradient alone. */
async function checkGrad(gpu: Gpu, t: Tensor, ref: Float64Array, fill: number, what: string) {
  const got = await gpu.read(t);
  assertClose(got, ref.map((v) => v + fill), what);
  assertRelRms(got.map((v) => v - fill), ref, what);
}

function filled(gpu: Gpu, n: number, fill: number): Tensor {
  return gpu.upload(new Float32Array(n).fill(fill), [n]);
}

gpuTest('activations forward/backward on ragged shapes', async (gpu) => {
  for (const [n, c] of SHAPES) {
    const x = randn(n * c, n + c, -6, 6), dy = randn(n * c, n + c + 1);
    const tx = gpu.upload(f32(x), [n, c]), tdy = gpu.upload(f32(dy), [n, c]), ty = gpu.empty([n, c]);
    for (const u of UNARY) {
      const what = `${u.name} N=${n} C=${c}`;
      u.fwd(gpu, tx, ty);
      assertClose(await gpu.read(ty), u.ref(x), `${what} y`);
      const tdx = filled(gpu, n * c, 0.25);
      u.bwd(gpu, tx, tdy, tdx);
      await checkGrad(gpu, tdx, u.bref(x, dy), 0.25, `${what} dx`);
      tdx.release();
    }
    for (const t of [tx, tdy, ty]) t.release();
  }
});

gpuTest('activations stay finite and accurate at extreme inputs', async (gpu) => {
  const x = Float64Array.from([-1e4, -100, -88.8, -30, -17, -1e-3, 0, 1e-7, 3e-3, 17, 30, 88.8, 100, 1e4]);
  const dy = Float64Array.from(x, (_, i) => 1 - 0.1 * i);
  const tx = gpu.upload(f32(x), [x.length]), tdy = gpu.upload(f32(dy), [x.length]), ty = gpu.empty([x.length]);
  for (const u of UNARY) {
    u.fwd(gpu, tx, ty);
    const y = await gpu.read(ty);
    assertClose(y, u.ref(x), `${u.name} y at extremes`);
    const tdx = gpu.zeros([x.length]);
    u.bwd(gpu, tx, tdy, tdx);
    assertClose(await gpu.read(tdx), u.bref(x, dy), `${u.name} dx at extremes`);
    tdx.release();
  }
  for (const t of [tx, tdy, ty]) t.release();
});

gpuTest('mul, lerp and scaleChannels forward/backward on ragged shapes', async (gpu) => {
  for (const [n, c] of SHAPES) {
    const seed = 7 * n + c;
    const a = randn(n * c, seed), b = randn(n * c, seed + 1, -2, 2), dy = randn(n * c, seed + 2);
    const mu = randn(c, seed + 3, 0, 1), s = randn(c, seed + 4, -2, 2);
    const ta = gpu.upload(f32(a), [n, c]), tb = gpu.upload(f32(b), [n, c]), tdy = gpu.upload(f32(dy), [n, c]);
    const tmu = gpu.upload(f32(mu), [c]), ts = gpu.upload(f32(s), [c]), ty = gpu.empty([n, c]);
    const what = `N=${n} C=${c}`;
    const grads = () => [filled(gpu, n * c, 0.25), filled(gpu, n * c, -0.5), filled(gpu, c, 0.75)];

    K.mulForward(gpu, ta, tb, ty);
    assertClose(await gpu.read(ty), R.mulRef(a, b), `mul ${what} y`);
    const [mda, mdb] = grads();
    K.mulBackward(gpu, ta, tb, tdy, mda, mdb);
    const m = R.mulBackwardRef(a, b, dy);
    await checkGrad(gpu, mda, m.da, 0.25, `mul ${what} da`);
    await checkGrad(gpu, mdb, m.db, -0.5, `mul ${what} db`);

    K.lerpForward(gpu, ta, tb, tmu, ty);
    assertClose(await gpu.read(ty), R.lerpRef(a, b, mu), `lerp ${what} y`);
    const [lda, ldb, ldmu] = grads();
    K.lerpBackward(gpu, ta, tb, tmu, tdy, lda, ldb, ldmu);
    const l = R.lerpBackwardRef(a, b, mu, dy);
    await checkGrad(gpu, lda, l.da, 0.25, `lerp ${what} da`);
    await checkGrad(gpu, ldb, l.db, -0.5, `lerp ${what} db`);
    await checkGrad(gpu, ldmu, l.dmu, 0.75, `lerp ${what} dμ`);

    K.scaleChannelsForward(gpu, ta, ts, ty);
    assertClose(await gpu.read(ty), R.scaleChannelsRef(a, s), `scale ${what} y`);
    const [sdx, , sds] = grads();
    K.scaleChannelsBackward(gpu, ta, ts, tdy, sdx, sds);
    const sc = R.scaleChannelsBackwardRef(a, s, dy);
    await checkGrad(gpu, sdx, sc.dx, 0.25, `scale ${what} dx`);
    await checkGrad(gpu, sds, sc.ds, 0.75, `scale ${what} ds`);
    for (const t of [ta, tb, tdy, tmu, ts, ty, mda, mdb, lda, ldb, ldmu, sdx, sds]) t.release();
  }
});

gpuTest('column gradients over many row chunks (N = 1000) and mul with a = b', async (gpu) => {
  const n = 1000, c = 5;
  const a = randn(n * c, 31), b = randn(n * c, 32), dy = randn(n * c, 33), mu = randn(c, 34, 0, 1);
  const ta = gpu.upload(f32(a), [n, c]), tb = gpu.upload(f32(b), [n, c]), tdy = gpu.upload(f32(dy), [n, c]);
  const tmu = gpu.upload(f32(mu), [c]), dmu = filled(gpu, c, 1), ds = gpu.zeros([c]);
  K.lerpBackward(gpu, ta, tb, tmu, tdy, null, null, dmu);
  await checkGrad(gpu, dmu, R.lerpBackwardRef(a, b, mu, dy).dmu, 1, 'lerp dμ, 16 chunks');
  K.scaleChannelsBackward(gpu, ta, tmu, tdy, null, ds);
  await checkGrad(gpu, ds, R.scaleChannelsBackwardRef(a, mu, dy).ds, 0, 'scale ds, 16 chunks');
  // y = a∘a: both gradients land in one buffer, 2·dy∘a.
  const da = gpu.zeros([n * c]);
  K.mulBackward(gpu, ta, ta, tdy, da, da);
  await checkGrad(gpu, da, dy.map((g, i) => 2 * g * a[i]), 0, 'mul(a, a) da');
  for (const t of [ta, tb, tdy, tmu, dmu, ds, da]) t.release();
});

gpuTest('token shift forward/backward per sequence', async (gpu) => {
  for (const [b, t] of [[1, 1], [1, 7], [7, 1], [5, 13], [2, 3]]) {
    for (const c of [1, 13, 64, 257]) {
      const x = randn(b * t * c, b * t + c), dy = randn(b * t * c, b + t + c);
      const tx = gpu.upload(f32(x), [b, t, c]), tdy = gpu.upload(f32(dy), [b, t, c]), ty = gpu.empty([b, t, c]);
      const what = `B=${b} T=${t} C=${c}`;
      K.tokenShiftForward(gpu, tx, ty, b, t);
      assertClose(await gpu.read(ty), R.tokenShiftRef(x, b, t, c), `${what} y`);
      const tdx = filled(gpu, b * t * c, 0.25);
      K.tokenShiftBackward(gpu, tdy, tdx, b, t);
      const ref = R.tokenShiftBackwardRef(dy, b, t, c);
      // T = 1: nothing flows back; the buffer keeps its fill (RMS of an all-zero reference is undefined).
      if (t === 1) assertClose(await gpu.read(tdx), ref.map((v) => v + 0.25), `${what} dx`);
      else await checkGrad(gpu, tdx, ref, 0.25, `${what} dx`);
      for (const u of [tx, tdy, ty, tdx]) u.release();
    }
  }
});

gpuTest('activations reject mismatched shapes', async (gpu) => {
  const x = gpu.empty([4, 6]), y = gpu.empty([4, 6]), short = gpu.empty([23]), v6 = gpu.empty([6]), v5 = gpu.empty([5]);
  assertThrows(() => K.siluForward(gpu, x, short), 'y [23] must have as many elements as x [4,6] (24)');
  assertThrows(() => K.sigmoidBackward(gpu, x, short, y), 'dy [23]');
  assertThrows(() => K.logSigmoidForward(gpu, x, y, Infinity), 'scale must be a finite number');
  assertThrows(() => K.mulForward(gpu, x, short, y), 'b [23]');
  assertThrows(() => K.mulBackward(gpu, x, y, y, short, null), 'da [23]');
  assertThrows(() => K.lerpForward(gpu, x, y, v5, y), 'mu [5] must be a per-channel vector');
  assertThrows(() => K.lerpBackward(gpu, x, y, v6, y, null, null, v5), 'dmu [5]');
  assertThrows(() => K.scaleChannelsForward(gpu, x, v5, y), 's [5] must be a per-channel vector');
  assertThrows(() => K.scaleChannelsBackward(gpu, x, v6, y, null, v5), 'ds [5]');
  assertThrows(() => K.tokenShiftForward(gpu, x, y, 5, 1), 'is not (B=5, T=1, C)');
  assertThrows(() => K.tokenShiftForward(gpu, x, y, 0, 4), 'B and T must be positive integers');
  assertThrows(() => K.tokenShiftBackward(gpu, x, short, 2, 2), 'dx [23]');
  for (const t of [x, y, short, v6, v5]) t.release();
  await gpu.sync(); // nothing invalid reached the device
});
