/**
 * The decoding forms of the linear attention's block (docs/design.md#decoding-state-of-the-recurrent-layers): the token
 * shift that carries the previous row (B, C), and the recurrent kernel from a carried state S (B, H, K, V), with a
 * per-channel decay and bonus u and with one decay per head (the chunked kernel's form), each against its f64 reference
 * on ragged shapes (elementwise and by relative RMS), from random non-zero carried states. The references are checked
 * first: passes over a sequence in pieces, carrying the state, give the whole sequence's output. Both refuse a
 * recording tape.
 */
import { gpuTest } from '../util/gpu.ts';
import { assertClose, assertRelRms, assertThrows, randn } from '../util/assert.ts';
import { laTuning, type LinearAttentionDims } from '../../src/kernels/linear_attention.ts';
import { linearAttentionStateUpdate } from '../../src/kernels/linear_attention_recurrent.ts';
import { tokenShiftCarryForward } from '../../src/kernels/token_shift.ts';
import { tokenShiftCarryRef, tokenShiftRef } from '../../src/reference/activations.ts';
import {
  broadcastDecay,
  recurrentForwardRef,
  recurrentStateUpdateRef,
  simpleGlaForwardRef,
} from '../../src/reference/linear_attention.ts';
import { linearAttention, recurrentLinearAttention } from '../../src/autograd/mixer_ops.ts';
import { tokenShift } from '../../src/autograd/ops.ts';
import { Tape } from '../../src/autograd/tape.ts';
import { concatSteps, stepsOf } from './steps.ts';

/** Log-decays logσ(x)/τ: strong (down to about −30 per step) or mild, as the recurrent kernel's tests. */
function decay(n: number, seed: number, strong: boolean): Float64Array {
  const [lo, hi, tau] = strong ? [-3, 3, 0.1] : [2, 6, 1];
  return randn(n, seed, lo, hi).map((x) => Math.fround(-Math.log1p(Math.exp(-x)) / tau));
}

interface Inputs {
  q: Float64Array;
  k: Float64Array;
  v: Float64Array;
  /** (B, T, H·K) per channel, or (B, T, H) per head. */
  w: Float64Array;
  u: Float64Array | null;
}

function inputs(d: LinearAttentionDims, seed: number, head: boolean, withU: boolean, strong: boolean): Inputs {
  const nq = d.b * d.t * d.h * d.dk, nv = d.b * d.t * d.h * d.dv;
  return {
    q: randn(nq, seed),
    k: randn(nq, seed + 1),
    v: randn(nv, seed + 2),
    w: decay(head ? d.b * d.t * d.h : nq, seed + 3, strong),
    u: withU ? randn(d.h * d.dk, seed + 4) : null,
  };
}

/** The reference decoding step: a head decay is broadcast over K, as the kernel reads it. */
function stateRef(x: Inputs, d: LinearAttentionDims, head: boolean, s0: Float64Array) {
  return recurrentStateUpdateRef(x.q, x.k, x.v, head ? broadcastDecay(x.w, d) : x.w, x.u, d, s0);
}

Deno.test('decoding references: pieces carrying the shifted row or the wkv state give the whole sequence', () => {
  const [b, t, c] = [2, 11, 3], x = randn(b * t * c, 1);
  const d = { b: 2, t: 11, h: 2, dk: 3, dv: 4, scale: 0.7 };
  const chan = inputs(d, 5, false, true, false), head = inputs(d, 9, true, false, false);
  for (const cuts of [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10], [5], [2, 9]]) {
    const bounds = [0, ...cuts, t];
    let row: Float64Array = new Float64Array(b * c);
    const states: Float64Array[] = [new Float64Array(b * d.h * d.dk * d.dv), new Float64Array(b * d.h * d.dk * d.dv)];
    const ys: Float64Array[] = [], outs: Float64Array[][] = [[], []];
    for (let i = 0; i + 1 < bounds.length; i++) {
      const [t0, t1] = [bounds[i], bounds[i + 1]], dp = { ...d, t: t1 - t0 };
      const r = tokenShiftCarryRef(stepsOf(x, b, t, c, t0, t1), row, b, t1 - t0, c);
      ys.push(r.y);
      row = r.carry;
      for (const [j, full, isHead] of [[0, chan, false], [1, head, true]] as const) {
        const hk = isHead ? d.h : d.h * d.dk, hv = d.h * d.dv, hq = d.h * d.dk;
        const piece = {
          q: stepsOf(full.q, b, t, hq, t0, t1),
          k: stepsOf(full.k, b, t, hq, t0, t1),
          v: stepsOf(full.v, b, t, hv, t0, t1),
          w: stepsOf(full.w, b, t, hk, t0, t1),
          u: full.u,
        };
        const q = stateRef(piece, dp, isHead, states[j]);
        outs[j].push(q.o);
        states[j] = q.state;
      }
    }
    assertClose(concatSteps(ys, b, c), tokenShiftRef(x, b, t, c), `shift in pieces ${cuts}`, 1e-12, 1e-12);
    const wholeChan = recurrentForwardRef(chan.q, chan.k, chan.v, chan.w, chan.u, d).o;
    assertClose(concatSteps(outs[0], b, d.h * d.dv), wholeChan, `wkv in pieces ${cuts}`, 1e-12, 1e-12);
    const wholeHead = simpleGlaForwardRef(head.q, head.k, head.v, head.w, d, 32).o;
    assertClose(concatSteps(outs[1], b, d.h * d.dv), wholeHead, `head decay in pieces ${cuts}`, 1e-12, 1e-12);
  }
});

// [B, T, C]: a decode step (one copy for all rows), B > 1 with T > 1 (a copy per row), long T.
const SHIFT: [number, number, number][] = [[1, 1, 1], [3, 1, 7], [2, 5, 33], [3, 2, 5], [1, 70, 6]];

for (const [b, t, c] of SHIFT) {
  gpuTest(`token shift carrying its row vs reference B=${b} T=${t} C=${c}`, async (gpu) => {
    const x = randn(b * t * c, 40 + t), row = randn(b * c, 41);
    const tx = gpu.upload(Float32Array.from(x), [b, t, c]), carry = gpu.upload(Float32Array.from(row), [b, c]);
    const y = gpu.upload(new Float32Array(b * t * c).fill(NaN), [b, t, c]);
    tokenShiftCarryForward(gpu, tx, y, carry, b, t);
    const ref = tokenShiftCarryRef(x, row, b, t, c);
    for (const [name, got, want] of [['y', y, ref.y], ['carry', carry, ref.carry]] as const) {
      const g = await gpu.read(got);
      assertClose(g, want, name);
      assertRelRms(g, want, name);
    }
    for (const v of [tx, carry, y]) v.release();
  });
}

// [dims, decay per head, u given, strong decay, steps per dispatch forced]: decode steps (T = 1)
// of each form, K and V not multiples of 4, K ≠ V, and prompts over several dispatches, where
// the state goes through the carried buffer between them.
const WKV: [LinearAttentionDims, boolean, boolean, boolean, number | null][] = [
  [{ b: 1, t: 1, h: 1, dk: 1, dv: 1, scale: 1 }, false, true, false, null],
  [{ b: 2, t: 1, h: 2, dk: 16, dv: 16, scale: 0.25 }, false, true, true, null],
  [{ b: 2, t: 1, h: 3, dk: 8, dv: 5, scale: 0.35 }, true, false, false, null],
  [{ b: 3, t: 7, h: 2, dk: 5, dv: 3, scale: 0.45 }, false, false, false, null],
  [{ b: 2, t: 40, h: 2, dk: 9, dv: 7, scale: 0.33 }, true, false, false, 3],
  [{ b: 1, t: 33, h: 1, dk: 32, dv: 32, scale: 0.18 }, false, true, false, 5],
];

for (const [d, head, withU, strong, steps] of WKV) {
  const name = `B=${d.b} T=${d.t} H=${d.h} K=${d.dk} V=${d.dv} ${head ? 'head' : 'channel'} decay${
    withU ? ' with u' : ''
  }${steps ? ` (${steps} steps per dispatch)` : ''}`;
  gpuTest(`linear attention carrying its state vs reference ${name}`, async (gpu) => {
    const x = inputs(d, 50 + d.t, head, withU, strong), s0 = randn(d.b * d.h * d.dk * d.dv, 51);
    const up = (a: Float64Array, shape: number[]) => gpu.upload(Float32Array.from(a), shape);
    const qs = [d.b, d.t, d.h * d.dk], vs = [d.b, d.t, d.h * d.dv];
    const t = {
      q: up(x.q, qs),
      k: up(x.k, qs),
      v: up(x.v, vs),
      w: up(x.w, head ? [d.b, d.t, d.h] : qs),
      u: x.u ? up(x.u, [d.h * d.dk]) : null,
      o: gpu.upload(new Float32Array(d.b * d.t * d.h * d.dv).fill(NaN), vs),
      state: up(s0, [d.b, d.h, d.dk, d.dv]),
    };
    laTuning.steps = steps;
    try {
      linearAttentionStateUpdate(gpu, t.q, t.k, t.v, t.w, t.u, t.o, t.state, d, head);
    } finally {
      laTuning.steps = null;
    }
    const ref = stateRef(x, d, head, s0);
    for (const [what, got, want] of [['o', t.o, ref.o], ['state', t.state, ref.state]] as const) {
      const g = await gpu.read(got);
      assertClose(g, want, what);
      assertRelRms(g, want, what);
    }
    for (const v of Object.values(t)) v?.release();
  });
}

gpuTest('decoding forms refuse a state of the wrong shape or aliasing an input, and a recording tape', (gpu) => {
  // T = V = 3: q, k, v and the state (B, H, K, V) all hold 18 floats.
  const d = { b: 1, t: 3, h: 2, dk: 3, dv: 3, scale: 1 }, qs = gpu.zeros([1, 3, 6]), o = gpu.zeros([1, 3, 6]);
  const gh = gpu.zeros([1, 3, 2]), state = gpu.zeros([1, 2, 3, 3]);
  assertThrows(
    () => linearAttentionStateUpdate(gpu, qs, qs, qs, qs, null, o, gpu.zeros([1, 2, 3, 4]), d),
    'state has shape [1,2,3,4] (24 elements), expected [1,2,3,3]',
  );
  assertThrows(
    () => linearAttentionStateUpdate(gpu, qs, qs, qs, qs, null, o, state, d, true),
    'w has shape [1,3,6] (18 elements), expected [1,3,2]',
  );
  assertThrows(() => linearAttentionStateUpdate(gpu, qs, qs, qs, gh, null, o, qs, d, true), 'state and q share');
  const x = gpu.zeros([1, 2, 4]), row = gpu.zeros([1, 4]);
  assertThrows(
    () => tokenShiftCarryForward(gpu, x, gpu.zeros([1, 2, 4]), gpu.zeros([1, 3]), 1, 2),
    'carry has shape [1,3] (3 elements), expected [1,4]',
  );
  assertThrows(() => tokenShiftCarryForward(gpu, x, x, row, 1, 2), 'y and x share');
  const tape = new Tape(gpu, new Map(), true);
  try {
    assertThrows(
      () => tokenShift(tape, x, 1, 2, 'shift', row),
      'shift: a carried decoding state runs on non-recording',
    );
    assertThrows(() => linearAttention(tape, qs, qs, qs, gh, d, 'la', state), 'la: a carried decoding state');
    assertThrows(() => recurrentLinearAttention(tape, qs, qs, qs, qs, null, d, 'wkv', state), 'wkv: a carried');
  } finally {
    tape.dispose();
  }
});
