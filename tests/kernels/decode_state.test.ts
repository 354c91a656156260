/**
 * The decoding forms of the Mamba block's two sequence kernels (docs/design.md#decoding-state-of-the-recurrent-layers):
 * the conv1d that carries its window (B, K−1, D) and the selective scan that carries its state h (B, D, N), each
 * against its f64 reference on ragged shapes (elementwise and by relative RMS), from non-zero carried states. The
 * references themselves are checked first: passes over a sequence in pieces, carrying the state, give the whole
 * sequence's output.
 */
import { gpuTest } from '../util/gpu.ts';
import { assertClose, assertRelRms, assertThrows, randn } from '../util/assert.ts';
import { conv1dCarryForward, type Conv1dDims } from '../../src/kernels/conv1d.ts';
import { type ScanDims, scanTuning, selectiveStateUpdate } from '../../src/kernels/selective_scan.ts';
import { conv1dCarryRef, conv1dRef } from '../../src/reference/conv1d.ts';
import { type ScanInputs, selectiveScanRef, selectiveStateUpdateRef } from '../../src/reference/selective_scan.ts';
import { scanInputs } from './scan_inputs.ts';
import { concatSteps, stepsOf } from './steps.ts';

/** The scan's inputs for steps t0 … t1−1. */
function scanSteps(x: ScanInputs, s: ScanDims, t0: number, t1: number): ScanInputs {
  const td = (a: Float64Array) => stepsOf(a, s.b, s.t, s.d, t0, t1),
    tn = (a: Float64Array) => stepsOf(a, s.b, s.t, s.n, t0, t1);
  return { ...x, u: td(x.u), delta: td(x.delta), Bm: tn(x.Bm), Cm: tn(x.Cm), z: x.z ? td(x.z) : null };
}

Deno.test('decoding references: pieces carrying the conv window or the scan state give the whole sequence', () => {
  const c = { b: 2, t: 11, d: 3, k: 4 }, x = randn(c.b * c.t * c.d, 1), w = randn(c.d * c.k, 2), bias = randn(c.d, 3);
  const s = { b: 2, t: 11, d: 3, n: 5 }, xs = scanInputs(s, 4, true, false);
  for (const cuts of [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10], [5], [2, 9]]) {
    const bounds = [0, ...cuts, c.t];
    let window: Float64Array = new Float64Array(c.b * (c.k - 1) * c.d),
      h: Float64Array = new Float64Array(s.b * s.d * s.n);
    const ys: Float64Array[] = [], outs: Float64Array[] = [];
    for (let i = 0; i + 1 < bounds.length; i++) {
      const [t0, t1] = [bounds[i], bounds[i + 1]];
      const r = conv1dCarryRef(stepsOf(x, c.b, c.t, c.d, t0, t1), w, bias, window, { ...c, t: t1 - t0 });
      ys.push(r.y);
      window = r.window;
      const q = selectiveStateUpdateRef(scanSteps(xs, s, t0, t1), { ...s, t: t1 - t0 }, h);
      outs.push(q.out);
      h = q.h;
    }
    assertClose(concatSteps(ys, c.b, c.d), conv1dRef(x, w, bias, c), `conv in pieces ${cuts}`, 1e-12, 1e-12);
    assertClose(concatSteps(outs, s.b, s.d), selectiveScanRef(xs, s), `scan in pieces ${cuts}`, 1e-12, 1e-12);
  }
});

// T = 1 (a decode step), T < K − 1 (the window keeps old entries), T ≥ K, several channels.
const CONV: Conv1dDims[] = [
  { b: 1, t: 1, d: 1, k: 4 },
  { b: 2, t: 2, d: 5, k: 4 },
  { b: 3, t: 1, d: 7, k: 2 },
  { b: 2, t: 13, d: 33, k: 4 },
  { b: 1, t: 70, d: 6, k: 3 },
];

for (const c of CONV) {
  gpuTest(`conv1d carrying its window vs reference b=${c.b} t=${c.t} d=${c.d} k=${c.k}`, async (gpu) => {
    const n = c.b * c.t * c.d, nw = c.b * (c.k - 1) * c.d;
    const x = randn(n, 21 + n), w = randn(c.d * c.k, 22), bias = randn(c.d, 23), win = randn(nw, 24);
    const tx = gpu.upload(Float32Array.from(x), [c.b, c.t, c.d]), tw = gpu.upload(Float32Array.from(w), [c.d, c.k]);
    const tb = gpu.upload(Float32Array.from(bias), [c.d]),
      twin = gpu.upload(Float32Array.from(win), [c.b, c.k - 1, c.d]);
    const y = gpu.empty([c.b, c.t, c.d]);
    conv1dCarryForward(gpu, tx, tw, tb, twin, y, c);
    const ref = conv1dCarryRef(x, w, bias, win, c);
    for (const [name, got, want] of [['y', y, ref.y], ['window', twin, ref.window]] as const) {
      const g = await gpu.read(got);
      assertClose(g, want, name);
      assertRelRms(g, want, name);
    }
    for (const t of [tx, tw, tb, twin, y]) t.release();
  });
}

gpuTest('conv1d carrying its window refuses k = 1 and a window of the wrong shape', (gpu) => {
  const c = { b: 1, t: 2, d: 3, k: 4 };
  const x = gpu.zeros([1, 2, 3]), w = gpu.zeros([3, 4]), bias = gpu.zeros([3]), y = gpu.zeros([1, 2, 3]);
  assertThrows(
    () => conv1dCarryForward(gpu, x, gpu.zeros([3, 1]), bias, gpu.zeros([1, 1, 3]), y, { ...c, k: 1 }),
    'carries no window (k ≥ 2)',
  );
  assertThrows(
    () => conv1dCarryForward(gpu, x, w, bias, gpu.zeros([1, 4, 3]), y, c),
    'window has shape [1,4,3] (12 elements), expected [1,3,3]',
  );
  // x is (B, T, D) = 6 floats, the window's size for K = 3, but an input's buffer.
  assertThrows(() => conv1dCarryForward(gpu, x, gpu.zeros([3, 3]), bias, x, y, { ...c, k: 3 }), 'share one GPUBuffer');
});

// [dims, gated, strong decay, chunks per dispatch forced]: a decode step, a prompt over several
// chunks of 32 (the state carried across chunks inside the kernel), and over several dispatches.
const SCAN: [ScanDims, boolean, boolean, number | null][] = [
  [{ b: 1, t: 1, d: 1, n: 1 }, true, false, null],
  [{ b: 2, t: 1, d: 7, n: 16 }, true, true, null],
  [{ b: 3, t: 5, d: 4, n: 3 }, false, false, null],
  [{ b: 2, t: 77, d: 9, n: 6 }, true, false, null],
  [{ b: 1, t: 100, d: 5, n: 4 }, true, false, 1],
];

for (const [s, gated, strong, forced] of SCAN) {
  gpuTest(
    `selective scan carrying its state vs reference b=${s.b} t=${s.t} d=${s.d} n=${s.n}${gated ? '' : ' ungated'}${
      forced ? ` (${forced} chunk per dispatch)` : ''
    }`,
    async (gpu) => {
      const x = scanInputs(s, 31 + s.t, gated, strong), h0 = randn(s.b * s.d * s.n, 32);
      const up = (a: Float64Array, shape: number[]) => gpu.upload(Float32Array.from(a), shape);
      const btd = [s.b, s.t, s.d], btn = [s.b, s.t, s.n];
      const t = {
        u: up(x.u, btd),
        delta: up(x.delta, btd),
        A: up(x.A, [s.d, s.n]),
        Bm: up(x.Bm, btn),
        Cm: up(x.Cm, btn),
        D: up(x.Dskip, [s.d]),
        bias: up(x.bias, [s.d]),
        z: x.z ? up(x.z, btd) : null,
        out: gpu.empty(btd),
        ssm: up(h0, [s.b, s.d, s.n]),
      };
      scanTuning.chunksPerDispatch = forced;
      try {
        selectiveStateUpdate(gpu, t.u, t.delta, t.A, t.Bm, t.Cm, t.D, t.bias, t.z, t.out, t.ssm, s);
      } finally {
        scanTuning.chunksPerDispatch = null;
      }
      const ref = selectiveStateUpdateRef(x, s, h0);
      for (const [name, got, want] of [['out', t.out, ref.out], ['state', t.ssm, ref.h]] as const) {
        const g = await gpu.read(got);
        assertClose(g, want, name);
        assertRelRms(g, want, name);
      }
      for (const v of Object.values(t)) v?.release();
    },
  );
}

gpuTest('selective scan carrying its state refuses a state of the wrong shape, or one aliasing an input', (gpu) => {
  const s = { b: 1, t: 2, d: 3, n: 4 }, btd = gpu.zeros([1, 2, 3]), btn = gpu.zeros([1, 2, 4]);
  const A = gpu.zeros([3, 4]), d = gpu.zeros([3]), out = gpu.zeros([1, 2, 3]);
  assertThrows(
    () => selectiveStateUpdate(gpu, btd, btd, A, btn, btn, d, d, null, out, gpu.zeros([1, 3, 5]), s),
    'ssm has shape [1,3,5] (15 elements), expected [1,3,4]',
  );
  // A is (D, N): the state's size, but the same buffer as an input.
  assertThrows(() => selectiveStateUpdate(gpu, btd, btd, A, btn, btn, d, d, null, out, A, s), 'ssm and A share');
});
