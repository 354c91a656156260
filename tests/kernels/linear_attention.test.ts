// Chunked scalar-decay linear attention: the f64 reference's backward against finite
// differences, then the GPU kernels against the reference (tolerances: docs/design.md#test-tolerances).
import { gpuTest } from '../util/gpu.ts';
import type { Gpu } from '../../src/gpu/context.ts';
import { assertClose, assertFiniteDiff, assertRelRms, assertThrows, dot, randn } from '../util/assert.ts';
import {
  LA_CHUNK,
  laTuning,
  linearAttentionBackward,
  type LinearAttentionDims,
  linearAttentionForward,
  linearAttentionStateShape,
} from '../../src/kernels/linear_attention.ts';
import {
  recurrentLinearAttentionBackward,
  recurrentLinearAttentionForward,
} from '../../src/kernels/linear_attention_recurrent.ts';
import { broadcastDecay, simpleGlaBackwardRef, simpleGlaForwardRef } from '../../src/reference/linear_attention.ts';

/**
 * Log-decays g = logsigmoid(x)/τ. Strong (x in [−3, 3), τ = 0.1: g down to about −30 per row)
 * is the stress case of docs/design.md#kernel-references-and-test-cases, but it forgets a chunk within a few rows, so
 * the states and inter-chunk terms barely matter; mild (x in [2, 6), τ = 1: g ≈ −0.13 … −0.002) carries them across
 * many chunks.
 */
function decay(n: number, seed: number, strong = true): Float64Array {
  const [lo, hi, tau] = strong ? [-3, 3, 0.1] : [2, 6, 1];
  return randn(n, seed, lo, hi).map((x) => Math.fround(-Math.log1p(Math.exp(-x)) / tau));
}

Deno.test('simple GLA reference backward matches central finite differences', () => {
  // T = 7 with one strong and one mild head; dg depends on every later row.
  const d: LinearAttentionDims = { b: 2, t: 7, h: 2, dk: 3, dv: 2, scale: 0.7 };
  const nq = d.b * d.t * d.h * d.dk;
  const nv = d.b * d.t * d.h * d.dv;
  const q = randn(nq, 1);
  const k = randn(nq, 2);
  const v = randn(nv, 3);
  const g = randn(d.b * d.t * d.h, 4, -3, 3).map((x) => -Math.log1p(Math.exp(-x)) / 2);
  const wo = randn(nv, 5);
  const loss = (qq: Float64Array, kk: Float64Array, vv: Float64Array, gg: Float64Array) =>
    dot(simpleGlaForwardRef(qq, kk, vv, gg, d, 4).o, wo);
  const gr = simpleGlaBackwardRef(q, k, v, g, wo, d);
  assertFiniteDiff((x) => loss(x, k, v, g), q, gr.dq, 'dq');
  assertFiniteDiff((x) => loss(q, x, v, g), k, gr.dk, 'dk');
  assertFiniteDiff((x) => loss(q, k, x, g), v, gr.dv, 'dv');
  assertFiniteDiff((x) => loss(q, k, v, x), g, gr.dg, 'dg');
});

/** Inputs of one case: q, k, v in [−1, 1), strong decays, a random dout and pre-filled grads. */
function inputs(d: LinearAttentionDims, seed: number, strong = true) {
  const nq = d.b * d.t * d.h * d.dk;
  const nv = d.b * d.t * d.h * d.dv;
  const ng = d.b * d.t * d.h;
  return {
    q: randn(nq, seed),
    k: randn(nq, seed + 1),
    v: randn(nv, seed + 2),
    g: decay(ng, seed + 3, strong),
    dout: randn(nv, seed + 4),
    pre: {
      dq: randn(nq, seed + 5),
      dk: randn(nq, seed + 6),
      dv: randn(nv, seed + 7),
      dg: randn(ng, seed + 8),
    },
  };
}

/** Runs forward and backward on the GPU, with every gradient pre-filled with `pre`. */
async function runChunked(gpu: Gpu, d: LinearAttentionDims, x: ReturnType<typeof inputs>) {
  const qs = [d.b, d.t, d.h * d.dk];
  const vs = [d.b, d.t, d.h * d.dv];
  const gs = [d.b, d.t, d.h];
  const up = (a: Float64Array, s: number[]) => gpu.upload(Float32Array.from(a), s);
  const [q, k, v, g, dout] = [up(x.q, qs), up(x.k, qs), up(x.v, vs), up(x.g, gs), up(x.dout, vs)];
  const nan = (s: number[]) => gpu.upload(new Float32Array(s.reduce((a, b) => a * b, 1)).fill(NaN), s);
  const o = nan(vs);
  const states = nan(linearAttentionStateShape(d));
  const [dq, dk, dv, dg] = [up(x.pre.dq, qs), up(x.pre.dk, qs), up(x.pre.dv, vs), up(x.pre.dg, gs)];
  linearAttentionForward(gpu, q, k, v, g, o, states, d);
  linearAttentionBackward(gpu, q, k, v, g, states, dout, dq, dk, dv, dg, d);
  const out = {
    o: await gpu.read(o),
    states: await gpu.read(states),
    dq: await gpu.read(dq),
    dk: await gpu.read(dk),
    dv: await gpu.read(dv),
    dg: await gpu.read(dg),
  };
  for (const t of [q, k, v, g, dout, o, states, dq, dk, dv, dg]) t.release();
  return out;
}

/**
 * Every element within 1e-4 + 1e-3·|ref|, and the relative RMS error below 5e-3 unless the
 * reference is exactly zero (dg at T = 1: the row's decay multiplies q_0 and divides k_0, which
 * cancel), where a relative RMS means nothing.
 */
function assertGrad(got: ArrayLike<number>, ref: Float64Array, what: string): void {
  assertClose(got, ref, what);
  if (!ref.every((x) => x === 0)) assertRelRms(got, ref, what);
}

/** Gradient read back minus what the buffer held before (the kernels accumulate). */
function fresh(got: ArrayLike<number>, pre: Float64Array): Float64Array {
  return Float64Array.from(pre, (p, i) => got[i] - p);
}

// [B, T, H, K, V, strong decay]: T of {1, 17, 63, 113, 257} (none a multiple of 32) plus 64
// (exactly two chunks), K = V of {32, 64, 128}, K ≠ V cases for the row/column indexing, and
// K, V not multiples of 4 (the masked lanes of the kernels' vec4 loads and stores).
const CASES: [number, number, number, number, number, boolean][] = [
  [1, 1, 2, 32, 32, true],
  [2, 17, 1, 64, 64, true],
  [1, 63, 2, 32, 32, true],
  [1, 64, 1, 32, 16, true],
  [1, 113, 1, 128, 128, true],
  [2, 257, 1, 32, 64, true],
  [2, 113, 2, 64, 64, false],
  [1, 257, 1, 16, 32, false],
  [2, 70, 2, 7, 5, false],
];

for (const [b, t, h, dk, dv, strong] of CASES) {
  const name = `B=${b} T=${t} H=${h} K=${dk} V=${dv} ${strong ? 'strong' : 'mild'} decay`;
  gpuTest(`linear attention (chunked) ${name} vs f64 reference`, async (gpu) => {
    const d: LinearAttentionDims = { b, t, h, dk, dv, scale: 1 / Math.sqrt(dk) * 1.5 };
    const x = inputs(d, 100 * t + dk + dv, strong);
    const ref = simpleGlaForwardRef(x.q, x.k, x.v, x.g, d, LA_CHUNK);
    const gr = simpleGlaBackwardRef(x.q, x.k, x.v, x.g, x.dout, d);
    const got = await runChunked(gpu, d, x);
    assertClose(got.o, ref.o, 'o');
    assertClose(got.states, ref.states, 'states');
    assertGrad(fresh(got.dq, x.pre.dq), gr.dq, 'dq');
    assertGrad(fresh(got.dk, x.pre.dk), gr.dk, 'dk');
    assertGrad(fresh(got.dv, x.pre.dv), gr.dv, 'dv');
    assertGrad(fresh(got.dg, x.pre.dg), gr.dg, 'dg');
  });
}

gpuTest('linear attention (chunked) splits its sequential loops over dispatches', async (gpu) => {
  // One step per dispatch: every chunk of the scans and every row of dg resumes from storage.
  const d: LinearAttentionDims = { b: 1, t: 100, h: 2, dk: 8, dv: 4, scale: 0.5 };
  const x = inputs(d, 7, false);
  const ref = simpleGlaForwardRef(x.q, x.k, x.v, x.g, d, LA_CHUNK);
  const gr = simpleGlaBackwardRef(x.q, x.k, x.v, x.g, x.dout, d);
  laTuning.steps = 1;
  try {
    const got = await runChunked(gpu, d, x);
    assertClose(got.o, ref.o, 'o');
    assertGrad(fresh(got.dq, x.pre.dq), gr.dq, 'dq');
    assertGrad(fresh(got.dk, x.pre.dk), gr.dk, 'dk');
    assertGrad(fresh(got.dg, x.pre.dg), gr.dg, 'dg');
  } finally {
    laTuning.steps = null;
  }
});

gpuTest(
  'chunked GPU kernel matches the recurrent GPU kernel (u = 1, w = g broadcast)',
  async (gpu) => {
    // The recurrent kernel is the oracle: T = 100 is three full chunks and a ragged fourth.
    const d: LinearAttentionDims = { b: 2, t: 100, h: 2, dk: 32, dv: 32, scale: 0.3 };
    const x = inputs(d, 51, false);
    const zero = (a: Float64Array) => new Float64Array(a.length);
    x.pre = { dq: zero(x.pre.dq), dk: zero(x.pre.dk), dv: zero(x.pre.dv), dg: zero(x.pre.dg) };
    const chunked = await runChunked(gpu, d, x);
    const qs = [d.b, d.t, d.h * d.dk];
    const vs = [d.b, d.t, d.h * d.dv];
    const up = (a: Float64Array, s: number[]) => gpu.upload(Float32Array.from(a), s);
    const [q, k, v, w, dout] = [
      up(x.q, qs),
      up(x.k, qs),
      up(x.v, vs),
      up(broadcastDecay(x.g, d), qs),
      up(x.dout, vs),
    ];
    const [o, dq, dk, dv, dw] = [
      gpu.zeros(vs),
      gpu.zeros(qs),
      gpu.zeros(qs),
      gpu.zeros(vs),
      gpu.zeros(qs),
    ];
    recurrentLinearAttentionForward(gpu, q, k, v, w, null, o, d);
    recurrentLinearAttentionBackward(gpu, q, k, v, w, null, dout, dq, dk, dv, dw, null, d);
    assertClose(chunked.o, await gpu.read(o), 'o');
    assertGrad(chunked.dq, Float64Array.from(await gpu.read(dq)), 'dq');
    assertGrad(chunked.dk, Float64Array.from(await gpu.read(dk)), 'dk');
    assertGrad(chunked.dv, Float64Array.from(await gpu.read(dv)), 'dv');
    // dg is dw summed over the K channels of each head.
    const rw = await gpu.read(dw);
    const dg = new Float64Array(d.b * d.t * d.h);
    for (let i = 0; i < rw.length; i++) dg[Math.floor(i / d.dk)] += rw[i];
    assertGrad(chunked.dg, dg, 'dg');
    for (const t of [q, k, v, w, dout, o, dq, dk, dv, dw]) t.release();
  },
);

gpuTest('linear attention (chunked) rejects bad shapes', (gpu) => {
  const d: LinearAttentionDims = { b: 1, t: 5, h: 1, dk: 4, dv: 4, scale: 1 };
  const a = gpu.zeros([1, 5, 4]);
  const g = gpu.zeros([1, 5, 1]);
  const st = gpu.zeros(linearAttentionStateShape(d));
  const o = gpu.zeros([1, 5, 4]);
  assertThrows(
    () => linearAttentionForward(gpu, a, a, a, g, o, st, { ...d, dk: 129 }),
    'at most 128',
  );
  assertThrows(() => linearAttentionForward(gpu, a, a, a, a, o, st, d), 'g has shape');
  assertThrows(() => linearAttentionForward(gpu, a, a, a, g, a, st, d), 'share one GPUBuffer');
  assertThrows(() => linearAttentionForward(gpu, a, a, a, g, o, st, { ...d, t: 0 }), 'dims.t');
  for (const t of [a, g, st, o]) t.release();
  return Promise.resolve();
});
