/**
 * Mamba selective scan (Gu & Dao 2023, arXiv 2312.00752), forward and backward, following
 * state-spaces/mamba `selective_scan_ref` (docs/design.md §10):
 *   Δ_t = softplus(δ_t + bias); h_t = exp(Δ_t A) h_{t−1} + Δ_t B_t u_t (h_0 = 0);
 *   y_t = C_t·h_t + D u_t; out_t = y_t · silu(z_t) (z null: no gate).
 *
 * Layouts: u, delta, z, out (B, T, D); Bm, Cm (B, T, N); A (D, N) (already negative; the model
 * passes −exp(A_log)); Dskip, bias (D); states {@link scanStateShape} = (B, D, nChunks, N), the
 * state entering every chunk of {@link SCAN_CHUNK} steps. The backward recomputes h inside each
 * chunk from those instead of storing all of h (B, T, D, N).
 *
 * Parallel over (b, d) for the scan itself and over (b, chunk, n) for dB/dC, which sum over
 * channels: each dB/dC element is owned by one invocation that loops over d, so there are no
 * atomics and no per-channel partial of size (B, T, D, N). dA, dD, dbias go through (B, D, ·)
 * partials and a reduce over b. On CPU adapters every loop is split over several dispatches so
 * no invocation passes lavapipe's 65 535-iteration cap (the scan carries its state between
 * dispatches in `states`, the backward its state gradient in the scratch).
 */
import type { Gpu } from '../gpu/context.ts';
import { Tensor } from '../gpu/tensor.ts';
import { checkDistinct, checkSize } from './attention_checks.ts';
import { specialise } from './shaders.ts';
import { grid1d } from './grid.ts';

/** Shapes of one scan: batch, sequence length, channels (d_inner), state size (d_state). */
export interface ScanDims {
  b: number;
  t: number;
  d: number;
  n: number;
}

/** Time steps per chunk: the forward saves one state per chunk, the backward recomputes within it. */
export const SCAN_CHUNK = 32;

/** Largest state size N on CPU adapters (one chunk of the backward must fit the loop budget). */
export const SCAN_MAX_N_CPU = 256;

/** Loop iterations one invocation may run per dispatch on CPU adapters (as flash_attention.ts). */
const CPU_LOOP_BUDGET = 34000;

/** Test hook: force the chunks (scan) and channels (dB/dC) handled per dispatch on every adapter. */
export const scanTuning: { chunksPerDispatch: number | null; channelsPerDispatch: number | null } = {
  chunksPerDispatch: null,
  channelsPerDispatch: null,
};

const WG = 64;
const SLOTS = 20; // bindings 0 … 19; the uniform is binding 20 in both shader files

/** Saved chunk-entry states of a scan: (B, D, ⌈T / SCAN_CHUNK⌉, N). */
export function scanStateShape(s: ScanDims): number[] {
  return [s.b, s.d, Math.ceil(s.t / SCAN_CHUNK), s.n];
}

function checkDims(what: string, s: ScanDims): void {
  for (const key of ['b', 't', 'd', 'n'] as const) {
    if (!Number.isInteger(s[key]) || s[key] < 1) {
      throw new Error(`${what}: dims.${key} must be a positive integer, got ${s[key]}`);
    }
  }
}

function checkInputs(what: string, s: ScanDims, ts: Record<string, Tensor | null>): void {
  checkDims(what, s);
  const { b, t, d, n } = s;
  const shapes: Record<string, number[]> = {
    u: [b, t, d],
    delta: [b, t, d],
    z: [b, t, d],
    out: [b, t, d],
    dout: [b, t, d],
    Bm: [b, t, n],
    Cm: [b, t, n],
    A: [d, n],
    Dskip: [d],
    bias: [d],
    states: scanStateShape(s),
  };
  for (const k of ['u', 'delta', 'z', 'A', 'Bm', 'Cm', 'Dskip', 'bias']) shapes[`d${k}`] = shapes[k];
  shapes.dB = shapes.Bm;
  shapes.dC = shapes.Cm;
  shapes.dD = shapes.Dskip;
  for (const [name, x] of Object.entries(ts)) if (x) checkSize(what, name, x, shapes[name]);
}

interface Range {
  c_lo: number;
  c_hi: number;
  d_lo: number;
  d_hi: number;
}

function dispatch(
  gpu: Gpu,
  file: 'selective_scan' | 'selective_scan_bwd',
  entry: string,
  s: ScanDims,
  slots: Record<number, Tensor>,
  items: number,
  r: Range,
  extra: { hasZ?: boolean; offs?: number[] } = {},
): void {
  const bindings: (Tensor | undefined)[] = new Array(SLOTS).fill(undefined);
  for (const [i, x] of Object.entries(slots)) bindings[Number(i)] = x;
  const nc = Math.ceil(s.t / SCAN_CHUNK);
  const offs = extra.offs ?? [0, 0, 0, 0, 0];
  // deno-fmt-ignore
  const params = new Uint32Array([
    s.b, s.t, s.d, s.n, nc, r.c_lo, r.c_hi, extra.hasZ ? 1 : 0,
    r.d_lo, r.d_hi, ...offs, 0,
  ]);
  const code = specialise(gpu.shaders[file], { CH: `${SCAN_CHUNK}u` });
  gpu.dispatch({ key: `${file}.${entry}`, code, entryPoint: entry }, bindings, params, grid1d(items, WG));
}

/** Splits [0, total) into pieces of `per` (all of it on GPUs unless the test hook forces a size). */
function pieces(total: number, per: number, forced: number | null, cpu: boolean): [number, number][] {
  const step = forced ?? (cpu ? Math.max(1, per) : total);
  const out: [number, number][] = [];
  for (let lo = 0; lo < total; lo += step) out.push([lo, Math.min(total, lo + step)]);
  return out;
}

/** A tensor of `n` floats at element `off` of `base` (a view for copies; not released on its own). */
function at(base: Tensor, off: number, n: number): Tensor {
  return new Tensor(base.gpu, base.buffer, [n], 'f32', base.offset + off * 4, false, base.label);
}

/** Pooled [A | Dskip | bias | extra…] scratch, so the kernels bind one buffer for the small operands. */
function packParams(
  gpu: Gpu,
  A: Tensor,
  Dskip: Tensor,
  bias: Tensor,
  s: ScanDims,
  extra: number,
  label: string,
): Tensor {
  const dn = s.d * s.n;
  const w = gpu.zeros([dn + 2 * s.d + extra], 'f32', label);
  gpu.copy(A, at(w, 0, dn));
  gpu.copy(Dskip, at(w, dn, s.d));
  gpu.copy(bias, at(w, dn + s.d, s.d));
  return w;
}

function forwardChunks(gpu: Gpu, s: ScanDims, slots: Record<number, Tensor>, hasZ: boolean): void {
  const nc = Math.ceil(s.t / SCAN_CHUNK);
  const perChunk = SCAN_CHUNK * (s.n + 2) + s.n + 2;
  for (const [lo, hi] of pieces(nc, Math.floor(CPU_LOOP_BUDGET / perChunk), scanTuning.chunksPerDispatch, gpu.isCpu)) {
    dispatch(gpu, 'selective_scan', 'fwd', s, slots, s.b * s.d, { c_lo: lo, c_hi: hi, d_lo: 0, d_hi: 0 }, { hasZ });
  }
}

/**
 * Selective scan forward: out (B, T, D) and the chunk-entry states (B, D, nChunks, N) that
 * {@link selectiveScanBackward} needs. Every element of out and states is written. One dispatch
 * (several on CPU adapters) plus a pooled (D·N + 2D) scratch for A, Dskip and bias.
 * @throws Error when a dimension is not a positive integer, a tensor's size or dtype does not
 *   match `s`, N is over {@link SCAN_MAX_N_CPU} on a CPU adapter, or out/states share a
 *   GPUBuffer with another operand.
 */
export function selectiveScanForward(
  gpu: Gpu,
  u: Tensor,
  delta: Tensor,
  A: Tensor,
  Bm: Tensor,
  Cm: Tensor,
  Dskip: Tensor,
  bias: Tensor,
  z: Tensor | null,
  out: Tensor,
  states: Tensor,
  s: ScanDims,
): void {
  const what = 'selectiveScanForward';
  checkInputs(what, s, { u, delta, A, Bm, Cm, Dskip, bias, z, out, states });
  checkCpuN(what, gpu, s);
  const ins: [string, Tensor][] = [['u', u], ['delta', delta], ['A', A], ['Bm', Bm], ['Cm', Cm], ['Dskip', Dskip], [
    'bias',
    bias,
  ]];
  if (z) ins.push(['z', z]);
  checkDistinct(what, [['out', out], ['states', states]], ins);
  const prm = packParams(gpu, A, Dskip, bias, s, 0, 'selective_scan.prm');
  try {
    forwardChunks(gpu, s, { 0: u, 1: delta, 2: Bm, 3: Cm, 4: z ?? u, 5: prm, 6: out, 7: states }, z !== null);
  } finally {
    prm.release();
  }
}

function checkCpuN(what: string, gpu: Gpu, s: ScanDims): void {
  if (gpu.isCpu && s.n > SCAN_MAX_N_CPU) {
    throw new Error(
      `${what}: state size n=${s.n} is over ${SCAN_MAX_N_CPU}, the most a CPU-adapter dispatch can loop over`,
    );
  }
}

/**
 * Selective scan backward: given dout = ∂L/∂out (B, T, D) and the states from
 * {@link selectiveScanForward} (same inputs and dims), accumulates (+=) du, ddelta, dz (B, T, D),
 * dA (D, N), dB, dC (B, T, N), dD, dbias (D). dz must be given exactly when z is. Recomputes y
 * (when gated) and h per chunk; scratch from the pool: one [A | Dskip | bias | states | dh carry
 * | partials] buffer and, when gated, g (B, T, D) and a states copy; all released once encoded.
 * @throws Error as {@link selectiveScanForward}, when dz and z are not both given or both null,
 *   or when a gradient shares a GPUBuffer with another operand.
 */
export function selectiveScanBackward(
  gpu: Gpu,
  u: Tensor,
  delta: Tensor,
  A: Tensor,
  Bm: Tensor,
  Cm: Tensor,
  Dskip: Tensor,
  bias: Tensor,
  z: Tensor | null,
  states: Tensor,
  dout: Tensor,
  grads: {
    du: Tensor;
    ddelta: Tensor;
    dA: Tensor;
    dB: Tensor;
    dC: Tensor;
    dD: Tensor;
    dbias: Tensor;
    dz: Tensor | null;
  },
  s: ScanDims,
): void {
  const what = 'selectiveScanBackward';
  checkInputs(what, s, { u, delta, A, Bm, Cm, Dskip, bias, z, states, dout });
  checkCpuN(what, gpu, s);
  const { du, ddelta, dA, dB, dC, dD, dbias, dz } = grads;
  if ((z === null) !== (dz === null)) {
    throw new Error(`${what}: dz must be given exactly when z is (z ${z ? 'given' : 'null'})`);
  }
  checkInputs(what, s, { du, ddelta, dA, dB, dC, dD, dbias, dz });
  const ins: [string, Tensor][] = [
    ['u', u],
    ['delta', delta],
    ['A', A],
    ['Bm', Bm],
    ['Cm', Cm],
    ['Dskip', Dskip],
    ['bias', bias],
    ['states', states],
    ['dout', dout],
  ];
  if (z) ins.push(['z', z]);
  const outs: [string, Tensor][] = [['du', du], ['ddelta', ddelta], ['dA', dA], ['dB', dB], ['dC', dC], ['dD', dD], [
    'dbias',
    dbias,
  ]];
  if (dz) outs.push(['dz', dz]);
  checkDistinct(what, outs, ins);

  const { b, d, n } = s;
  if (gpu.isCpu && 3 * b > CPU_LOOP_BUDGET) {
    throw new Error(`${what}: batch b=${b} is over what one CPU-adapter dispatch can sum`);
  }
  const nc = Math.ceil(s.t / SCAN_CHUNK);
  const sz = b * d * nc * n;
  const dn = d * n;
  // wk = [A | Dskip | bias | states | dh carry | dA (B, D, N) | dD (B, D) | dbias (B, D)]
  const offSt = dn + 2 * d;
  const offs = [offSt, offSt + sz, offSt + 2 * sz, offSt + 2 * sz + b * dn, offSt + 2 * sz + b * dn + b * d];
  const wk = packParams(gpu, A, Dskip, bias, s, 2 * sz + b * dn + 2 * b * d, 'selective_scan.wk');
  const owned: Tensor[] = [wk];
  try {
    gpu.copy(states, at(wk, offSt, sz));
    let g = dout;
    if (z && dz) {
      // y is needed for dz: rerun the forward ungated into a scratch that then becomes g.
      const y = gpu.empty([b, s.t, d], 'f32', 'selective_scan.g');
      const st2 = gpu.empty(scanStateShape(s), 'f32', 'selective_scan.states2');
      owned.push(y, st2);
      forwardChunks(gpu, s, { 0: u, 1: delta, 2: Bm, 3: Cm, 4: u, 5: wk, 6: y, 7: st2 }, false);
      dispatch(gpu, 'selective_scan_bwd', 'gate_bwd', s, { 4: z, 8: dout, 12: y, 13: dz }, b * s.t * d, {
        c_lo: 0,
        c_hi: 0,
        d_lo: 0,
        d_hi: 0,
      });
      g = y;
    }
    const common = { 0: u, 1: delta, 2: Bm, 3: Cm, 8: g, 9: wk };
    const perChunk = 2 * SCAN_CHUNK + n * (2 * SCAN_CHUNK + 3) + 2;
    const chunks = pieces(nc, Math.floor(CPU_LOOP_BUDGET / perChunk), scanTuning.chunksPerDispatch, gpu.isCpu);
    for (const [lo, hi] of chunks.reverse()) {
      dispatch(gpu, 'selective_scan_bwd', 'bwd_main', s, { ...common, 10: du, 11: ddelta }, b * d, {
        c_lo: lo,
        c_hi: hi,
        d_lo: 0,
        d_hi: 0,
      }, { offs });
    }
    const perChannel = 2 * SCAN_CHUNK + 1;
    const chans = pieces(
      d,
      Math.floor((CPU_LOOP_BUDGET - SCAN_CHUNK) / perChannel),
      scanTuning.channelsPerDispatch,
      gpu.isCpu,
    );
    for (const [lo, hi] of chans) {
      dispatch(gpu, 'selective_scan_bwd', 'bwd_bc', s, { ...common, 14: dB, 15: dC }, b * nc * n, {
        c_lo: 0,
        c_hi: nc,
        d_lo: lo,
        d_hi: hi,
      }, { offs });
    }
    dispatch(gpu, 'selective_scan_bwd', 'bwd_reduce', s, { 9: wk, 16: dA, 17: dD, 18: dbias }, dn, {
      c_lo: 0,
      c_hi: 0,
      d_lo: 0,
      d_hi: 0,
    }, { offs });
  } finally {
    for (const t of owned) t.release();
  }
}
