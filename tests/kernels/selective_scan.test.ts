import { gpuTest } from '../util/gpu.ts';
import { assertClose, assertFiniteDiff, assertRelRms, assertThrows, dot, f64, randn } from '../util/assert.ts';
import { type ScanDims, scanStateShape, scanTuning, selectiveScanForward } from '../../src/kernels/selective_scan.ts';
import { selectiveScanBackward } from '../../src/kernels/selective_scan_bwd.ts';
import {
  type ScanGrads,
  selectiveScanBackwardRef,
  selectiveScanRef,
  softplus,
} from '../../src/reference/selective_scan.ts';
import type { Gpu } from '../../src/gpu/context.ts';
import type { Tensor } from '../../src/gpu/tensor.ts';
import { scanInputs } from './scan_inputs.ts';

const KEYS = ['u', 'delta', 'A', 'Bm', 'Cm', 'Dskip', 'bias', 'z'] as const;
const GRAD: Record<(typeof KEYS)[number], keyof ScanGrads> = {
  u: 'du',
  delta: 'ddelta',
  A: 'dA',
  Bm: 'dB',
  Cm: 'dC',
  Dskip: 'dD',
  bias: 'dbias',
  z: 'dz',
};

for (const [gated, strong] of [[false, false], [true, false], [true, true]]) {
  Deno.test(`reference backward matches finite differences (z ${gated ? 'given' : 'null'}, ${strong ? 'strong' : 'weak'} decay)`, () => {
    const s = { b: 2, t: 6, d: 3, n: 2 };
    const x = scanInputs(s, 1, gated, strong);
    const w = randn(s.b * s.t * s.d, 99);
    const g = selectiveScanBackwardRef(x, w, s);
    for (const k of KEYS) {
      const v = x[k];
      if (!v) continue;
      assertFiniteDiff((p) => dot(selectiveScanRef({ ...x, [k]: p }, s), w), v, g[GRAD[k]] as Float64Array, k);
    }
  });
}

Deno.test('reference scan equals the closed form h_t = Σ_s (Π_{r=s+1..t} Ā_r) Δ_s B_s u_s', () => {
  const s = { b: 2, t: 9, d: 3, n: 2 };
  const x = scanInputs(s, 5, true, false);
  const out = selectiveScanRef(x, s);
  const ref = new Float64Array(out.length);
  for (let b = 0; b < s.b; b++) {
    for (let t = 0; t < s.t; t++) {
      for (let d = 0; d < s.d; d++) {
        const i = (b * s.t + t) * s.d + d;
        const dt = (r: number) => softplus(x.delta[(b * s.t + r) * s.d + d] + x.bias[d]);
        let y = x.Dskip[d] * x.u[i];
        for (let n = 0; n < s.n; n++) {
          let h = 0;
          for (let r = 0; r <= t; r++) {
            let decay = 1;
            for (let q = r + 1; q <= t; q++) decay *= Math.exp(dt(q) * x.A[d * s.n + n]);
            h += decay * dt(r) * x.Bm[(b * s.t + r) * s.n + n] * x.u[(b * s.t + r) * s.d + d];
          }
          y += x.Cm[(b * s.t + t) * s.n + n] * h;
        }
        const zz = x.z![i];
        ref[i] = y * zz / (1 + Math.exp(-zz));
      }
    }
  }
  assertClose(out, ref, 'closed form', 1e-12, 1e-10);
});

function up(gpu: Gpu, a: Float64Array, shape: number[]): Tensor {
  return gpu.upload(Float32Array.from(a), shape);
}

/** Runs forward and backward on the GPU (gradients accumulating onto random values) and compares with the reference. */
async function checkGpu(gpu: Gpu, s: ScanDims, gated: boolean, strong: boolean, seed: number): Promise<void> {
  const { b, t, d, n } = s;
  const x = scanInputs(s, seed, gated, strong);
  const shapes = {
    u: [b, t, d],
    delta: [b, t, d],
    A: [d, n],
    Bm: [b, t, n],
    Cm: [b, t, n],
    Dskip: [d],
    bias: [d],
    z: [b, t, d],
  };
  const T = {} as Record<(typeof KEYS)[number], Tensor | null>;
  for (const k of KEYS) T[k] = x[k] ? up(gpu, x[k]!, shapes[k]) : null;
  const out = gpu.empty([b, t, d]);
  const states = gpu.empty(scanStateShape(s));
  selectiveScanForward(gpu, T.u!, T.delta!, T.A!, T.Bm!, T.Cm!, T.Dskip!, T.bias!, T.z, out, states, s);
  const tag = `b=${b} t=${t} d=${d} n=${n} z=${gated} strong=${strong}`;
  assertClose(await gpu.read(out), selectiveScanRef(x, s), `out ${tag}`);

  const dout = randn(b * t * d, seed + 50);
  const ref = selectiveScanBackwardRef(x, dout, s);
  const base: Partial<Record<keyof ScanGrads, Float64Array>> = {};
  const G = {} as Record<keyof ScanGrads, Tensor | null>;
  KEYS.forEach((k, i) => {
    const gk = GRAD[k];
    if (!ref[gk]) return void (G[gk] = null);
    base[gk] = randn(ref[gk]!.length, seed + 60 + i);
    G[gk] = up(gpu, base[gk]!, shapes[k]);
  });
  const tdout = up(gpu, dout, [b, t, d]);
  selectiveScanBackward(gpu, T.u!, T.delta!, T.A!, T.Bm!, T.Cm!, T.Dskip!, T.bias!, T.z, states, tdout, {
    du: G.du!,
    ddelta: G.ddelta!,
    dA: G.dA!,
    dB: G.dB!,
    dC: G.dC!,
    dD: G.dD!,
    dbias: G.dbias!,
    dz: G.dz,
  }, s);
  for (const k of KEYS) {
    const gk = GRAD[k];
    if (!G[gk]) continue;
    const got = f64(await gpu.read(G[gk]!)).map((v, i) => v - base[gk]![i]);
    assertClose(got, ref[gk]!, `${gk} ${tag}`);
    assertRelRms(got, ref[gk]!, `${gk} ${tag}`);
  }
  for (const v of [...Object.values(T), ...Object.values(G), out, states, tdout]) v?.release();
}

// Ragged T (none a multiple of the 32-step chunk but 1, 17 < 32), D and N per
// docs/design.md#kernel-references-and-test-cases.
const CASES: [ScanDims, boolean, boolean][] = [
  [{ b: 1, t: 1, d: 1, n: 1 }, false, false],
  [{ b: 2, t: 17, d: 7, n: 16 }, true, false],
  [{ b: 1, t: 63, d: 33, n: 16 }, false, true],
  [{ b: 2, t: 113, d: 7, n: 1 }, true, true],
  [{ b: 1, t: 257, d: 33, n: 16 }, true, false],
  [{ b: 3, t: 64, d: 1, n: 16 }, true, true],
];

for (const [s, gated, strong] of CASES) {
  gpuTest(
    `selective scan GPU vs reference b=${s.b} t=${s.t} d=${s.d} n=${s.n} z=${gated} strong=${strong}`,
    (gpu) => checkGpu(gpu, s, gated, strong, s.t + s.d),
  );
}

gpuTest('selective scan split over dispatches (state and its gradient carried between them)', async (gpu) => {
  scanTuning.chunksPerDispatch = 1;
  scanTuning.channelsPerDispatch = 2;
  try {
    await checkGpu(gpu, { b: 2, t: 113, d: 5, n: 4 }, true, false, 7);
    await checkGpu(gpu, { b: 1, t: 70, d: 3, n: 16 }, false, true, 8);
  } finally {
    scanTuning.chunksPerDispatch = null;
    scanTuning.channelsPerDispatch = null;
  }
});

gpuTest(
  "selective scan past lavapipe's loop cap (T·(N+2) > 65 535: split over dispatches by default on CPU)",
  (gpu) => checkGpu(gpu, { b: 1, t: 4100, d: 2, n: 16 }, true, false, 9),
);

gpuTest('selective scan rejects bad shapes, missing dz and aliasing', async (gpu) => {
  const s = { b: 1, t: 4, d: 2, n: 3 };
  const btd = () => gpu.zeros([1, 4, 2]), btn = () => gpu.zeros([1, 4, 3]);
  const u = btd(),
    delta = btd(),
    A = gpu.zeros([2, 3]),
    Bm = btn(),
    Cm = btn(),
    Dk = gpu.zeros([2]),
    bias = gpu.zeros([2]);
  const out = btd(), states = gpu.zeros(scanStateShape(s));
  assertThrows(
    () => selectiveScanForward(gpu, u, delta, A, Bm, Cm, Dk, bias, null, out, gpu.zeros([5]), s),
    'states has shape',
  );
  assertThrows(
    () =>
      selectiveScanForward(gpu, u, delta, gpu.zeros([3, 2, 1]), Bm, Cm, Dk, bias, null, out, states, { ...s, d: 3 }),
    'u has shape',
  );
  assertThrows(
    () => selectiveScanForward(gpu, u, delta, A, Bm, Cm, Dk, bias, null, u, states, s),
    'share one GPUBuffer',
  );
  assertThrows(
    () => selectiveScanForward(gpu, u, delta, A, Bm, Cm, Dk, bias, null, out, states, { ...s, n: 0 }),
    'dims.n',
  );
  const grads = {
    du: btd(),
    ddelta: btd(),
    dA: gpu.zeros([2, 3]),
    dB: btn(),
    dC: btn(),
    dD: gpu.zeros([2]),
    dbias: gpu.zeros([2]),
    dz: null,
  };
  assertThrows(
    () => selectiveScanBackward(gpu, u, delta, A, Bm, Cm, Dk, bias, btd(), states, out, grads, s),
    'dz must be given',
  );
  assertThrows(
    () => selectiveScanBackward(gpu, u, delta, A, Bm, Cm, Dk, bias, null, states, out, { ...grads, dB: btd() }, s),
    'dB has shape',
  );
  await gpu.sync();
});
