// Recurrent per-channel-decay linear attention (GLA / RWKV-6 with bonus u): the f64 reference's
// backward against finite differences, then the GPU kernels against the reference. The chunked
// kernel is checked against this one in linear_attention.test.ts.
import { gpuTest } from '../util/gpu.ts';
import type { Gpu } from '../../src/gpu/context.ts';
import { assertClose, assertFiniteDiff, assertRelRms, assertThrows, dot, randn } from '../util/assert.ts';
import { laTuning, type LinearAttentionDims } from '../../src/kernels/linear_attention.ts';
import {
  recurrentLinearAttentionBackward,
  recurrentLinearAttentionForward,
} from '../../src/kernels/linear_attention_recurrent.ts';
import { recurrentBackwardRef, recurrentForwardRef } from '../../src/reference/linear_attention.ts';

/**
 * Log-decays w = logsigmoid(x)/τ: strong (x in [−3, 3), τ = 0.1: down to about −30 per row,
 * the stress case of docs/design.md#kernel-references-and-test-cases) or mild (x in [2, 6), τ = 1), which keeps the
 * state for long.
 */
function decay(n: number, seed: number, strong: boolean): Float64Array {
  const [lo, hi, tau] = strong ? [-3, 3, 0.1] : [2, 6, 1];
  return randn(n, seed, lo, hi).map((x) => Math.fround(-Math.log1p(Math.exp(-x)) / tau));
}

/** Every element within 1e-4 + 1e-3·|ref|, and the relative RMS error below 5e-3 where the reference is not exactly zero. */
function assertGrad(got: ArrayLike<number>, ref: Float64Array, what: string): void {
  assertClose(got, ref, what);
  if (!ref.every((x) => x === 0)) assertRelRms(got, ref, what);
}

Deno.test('recurrent reference backward (with bonus u) matches central finite differences', () => {
  const d: LinearAttentionDims = { b: 2, t: 6, h: 2, dk: 3, dv: 2, scale: 0.8 };
  const nq = d.b * d.t * d.h * d.dk;
  const nv = d.b * d.t * d.h * d.dv;
  const q = randn(nq, 11);
  const k = randn(nq, 12);
  const v = randn(nv, 13);
  const w = randn(nq, 14, -3, 3).map((x) => -Math.log1p(Math.exp(-x)) / 2);
  const u = randn(d.h * d.dk, 15);
  const wo = randn(nv, 16);
  const loss = (
    qq: Float64Array,
    kk: Float64Array,
    vv: Float64Array,
    ww: Float64Array,
    uu: Float64Array,
  ) => dot(recurrentForwardRef(qq, kk, vv, ww, uu, d).o, wo);
  const gr = recurrentBackwardRef(q, k, v, w, u, wo, d);
  assertFiniteDiff((x) => loss(x, k, v, w, u), q, gr.dq, 'dq');
  assertFiniteDiff((x) => loss(q, x, v, w, u), k, gr.dk, 'dk');
  assertFiniteDiff((x) => loss(q, k, x, w, u), v, gr.dv, 'dv');
  assertFiniteDiff((x) => loss(q, k, v, x, u), w, gr.dw, 'dw');
  assertFiniteDiff((x) => loss(q, k, v, w, x), u, gr.du!, 'du');
});

interface Case {
  d: LinearAttentionDims;
  q: Float64Array;
  k: Float64Array;
  v: Float64Array;
  w: Float64Array;
  u: Float64Array | null;
  dout: Float64Array;
}

/** Forward and backward on the GPU, gradients pre-filled with `pre`; returns what is read back. */
async function runRecurrent(
  gpu: Gpu,
  c: Case,
  pre: Record<'dq' | 'dk' | 'dv' | 'dw' | 'du', Float64Array>,
) {
  const { d } = c;
  const qs = [d.b, d.t, d.h * d.dk];
  const vs = [d.b, d.t, d.h * d.dv];
  const up = (a: Float64Array, s: number[]) => gpu.upload(Float32Array.from(a), s);
  const [q, k, v, w, dout] = [up(c.q, qs), up(c.k, qs), up(c.v, vs), up(c.w, qs), up(c.dout, vs)];
  const u = c.u ? up(c.u, [d.h * d.dk]) : null;
  const o = gpu.upload(new Float32Array(d.b * d.t * d.h * d.dv).fill(NaN), vs);
  const [dq, dk, dv, dw] = [up(pre.dq, qs), up(pre.dk, qs), up(pre.dv, vs), up(pre.dw, qs)];
  const du = c.u ? up(pre.du, [d.h * d.dk]) : null;
  recurrentLinearAttentionForward(gpu, q, k, v, w, u, o, d);
  recurrentLinearAttentionBackward(gpu, q, k, v, w, u, dout, dq, dk, dv, dw, du, d);
  const res = {
    o: await gpu.read(o),
    dq: await gpu.read(dq),
    dk: await gpu.read(dk),
    dv: await gpu.read(dv),
    dw: await gpu.read(dw),
    du: du ? await gpu.read(du) : null,
  };
  for (const t of [q, k, v, w, dout, o, dq, dk, dv, dw, u, du]) t?.release();
  return res;
}

function makeCase(d: LinearAttentionDims, seed: number, withU: boolean, strong: boolean): Case {
  const nq = d.b * d.t * d.h * d.dk;
  const nv = d.b * d.t * d.h * d.dv;
  return {
    d,
    q: randn(nq, seed),
    k: randn(nq, seed + 1),
    v: randn(nv, seed + 2),
    w: decay(nq, seed + 3, strong),
    u: withU ? randn(d.h * d.dk, seed + 4) : null,
    dout: randn(nv, seed + 5),
  };
}

function prefill(d: LinearAttentionDims, seed: number) {
  const nq = d.b * d.t * d.h * d.dk;
  const nv = d.b * d.t * d.h * d.dv;
  return {
    dq: randn(nq, seed),
    dk: randn(nq, seed + 1),
    dv: randn(nv, seed + 2),
    dw: randn(nq, seed + 3),
    du: randn(d.h * d.dk, seed + 4),
  };
}

const fresh = (got: ArrayLike<number>, pre: Float64Array) => Float64Array.from(pre, (p, i) => got[i] - p);

// [B, T, H, K, V, steps per dispatch (null: the budget's), strong decay]: ragged T, K = V of
// {32, 64, 128}, K ≠ V, K and V not multiples of 4 (masked vec4 lanes), and forced short
// dispatches so the state, dw and du carries are exercised.
const CASES: [number, number, number, number, number, number | null, boolean][] = [
  [1, 1, 2, 32, 32, null, true],
  [2, 17, 2, 64, 64, null, true],
  [1, 63, 1, 128, 128, null, true],
  [2, 113, 2, 32, 16, null, true],
  [1, 257, 1, 32, 32, null, true],
  [1, 257, 1, 64, 32, null, false],
  [2, 40, 2, 16, 8, 7, false],
  [1, 50, 3, 6, 7, null, false],
];

for (const [b, t, h, dk, dv, steps, strong] of CASES) {
  const name = `B=${b} T=${t} H=${h} K=${dk} V=${dv} steps=${steps} ${strong ? 'strong' : 'mild'} decay`;
  gpuTest(`recurrent linear attention ${name} with random u vs f64 reference`, async (gpu) => {
    const d: LinearAttentionDims = { b, t, h, dk, dv, scale: 1.3 / Math.sqrt(dk) };
    const c = makeCase(d, 10 * t + dk, true, strong);
    const pre = prefill(d, 77);
    const ref = recurrentForwardRef(c.q, c.k, c.v, c.w, c.u, d).o;
    const gr = recurrentBackwardRef(c.q, c.k, c.v, c.w, c.u, c.dout, d);
    laTuning.steps = steps;
    try {
      const got = await runRecurrent(gpu, c, pre);
      assertClose(got.o, ref, 'o');
      assertGrad(fresh(got.dq, pre.dq), gr.dq, 'dq');
      assertGrad(fresh(got.dk, pre.dk), gr.dk, 'dk');
      assertGrad(fresh(got.dv, pre.dv), gr.dv, 'dv');
      assertGrad(fresh(got.dw, pre.dw), gr.dw, 'dw');
      assertGrad(fresh(got.du!, pre.du), gr.du!, 'du');
    } finally {
      laTuning.steps = null;
    }
  });
}

gpuTest('recurrent linear attention rejects bad arguments', (gpu) => {
  const d: LinearAttentionDims = { b: 1, t: 3, h: 1, dk: 4, dv: 4, scale: 1 };
  const a = gpu.zeros([1, 3, 4]);
  const o = gpu.zeros([1, 3, 4]);
  const u = gpu.zeros([4]);
  const g = [
    gpu.zeros([1, 3, 4]),
    gpu.zeros([1, 3, 4]),
    gpu.zeros([1, 3, 4]),
    gpu.zeros([1, 3, 4]),
  ];
  assertThrows(
    () => recurrentLinearAttentionForward(gpu, a, a, a, a, gpu.zeros([3]), o, d),
    'u has shape',
  );
  assertThrows(
    () => recurrentLinearAttentionForward(gpu, a, a, a, a, null, a, d),
    'share one GPUBuffer',
  );
  assertThrows(
    () => recurrentLinearAttentionForward(gpu, a, a, a, a, null, o, { ...d, dv: 200 }),
    'at most 128',
  );
  assertThrows(
    () => recurrentLinearAttentionBackward(gpu, a, a, a, a, u, a, g[0], g[1], g[2], g[3], null, d),
    'both be given',
  );
  for (const t of [a, o, u, ...g]) t.release();
  return Promise.resolve();
});
