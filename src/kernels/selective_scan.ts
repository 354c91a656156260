/**
 * Mamba selective scan (Gu & Dao 2023, arXiv 2312.00752) forward, following
 * state-spaces/mamba `selective_scan_ref` (docs/design.md#selective-scan), and what the backward in
 * selective_scan_bwd.ts shares with it (dims, checks, the dispatch of either shader file):
 *   Δ_t = softplus(δ_t + bias); h_t = exp(Δ_t A) h_{t−1} + Δ_t B_t u_t (h_0 = 0);
 *   y_t = C_t·h_t + D u_t; out_t = y_t · silu(z_t) (z null: no gate).
 *
 * Layouts: u, delta, z, out (B, T, D); Bm, Cm (B, T, N); A (D, N) (already negative; the model
 * passes −exp(A_log)); Dskip, bias (D); states {@link scanStateShape} = (B, D, nChunks, N), the
 * state entering every chunk of {@link SCAN_CHUNK} steps. The backward recomputes h inside each
 * chunk from those instead of storing all of h (B, T, D, N).
 *
 * Parallel over (b, d). On CPU adapters the chunks are split over several dispatches so no
 * invocation passes lavapipe's 65 535-iteration cap, the scan carrying its state between
 * dispatches in `states`.
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
export const CPU_LOOP_BUDGET = 34000;

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

/** @throws Error unless the dims are positive integers and every given tensor has its layout's shape. */
export function checkInputs(what: string, s: ScanDims, ts: Record<string, Tensor | null>): void {
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

/** One dispatch of `entry` in either shader file over `items` invocations, bindings by slot number. */
export function dispatch(
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
export function pieces(total: number, per: number, forced: number | null, cpu: boolean): [number, number][] {
  const step = forced ?? (cpu ? Math.max(1, per) : total);
  const out: [number, number][] = [];
  for (let lo = 0; lo < total; lo += step) out.push([lo, Math.min(total, lo + step)]);
  return out;
}

/** A tensor of `n` floats at element `off` of `base` (a view for copies; not released on its own). */
export function at(base: Tensor, off: number, n: number): Tensor {
  return base.range(off, n);
}

/** Pooled [A | Dskip | bias | extra…] scratch, so the kernels bind one buffer for the small operands. */
export function packParams(
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

/** The forward scan (`fwd`, or `fwd_carry`) over every chunk, in as many dispatches as the CPU loop budget needs. */
export function forwardChunks(
  gpu: Gpu,
  s: ScanDims,
  slots: Record<number, Tensor>,
  hasZ: boolean,
  entry: 'fwd' | 'fwd_carry' = 'fwd',
): void {
  const nc = Math.ceil(s.t / SCAN_CHUNK);
  const perChunk = SCAN_CHUNK * (s.n + 2) + s.n + 2;
  for (const [lo, hi] of pieces(nc, Math.floor(CPU_LOOP_BUDGET / perChunk), scanTuning.chunksPerDispatch, gpu.isCpu)) {
    dispatch(gpu, 'selective_scan', entry, s, slots, s.b * s.d, { c_lo: lo, c_hi: hi, d_lo: 0, d_hi: 0 }, { hasZ });
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
  const x = { u, delta, A, Bm, Cm, Dskip, bias, z };
  runForward(gpu, 'selectiveScanForward', x, out, ['states', states, scanStateShape(s)], s, 'fwd');
}

/**
 * The decoding form (Mamba's selective_state_update; docs/design.md#decoding-state-of-the-recurrent-layers): out (B, T,
 * D) as {@link selectiveScanForward}'s, but from the state h (B, D, N) in `ssm` instead of zero, and `ssm` is then
 * overwritten with the state after the last step. Passes over a sequence in pieces, carrying `ssm`, give the whole
 * scan's output. No chunk-entry states are saved (no gradient). Dispatches and scratch as the forward's.
 * @throws Error as {@link selectiveScanForward}, or when ssm is not (B, D, N) f32 or shares a
 *   GPUBuffer with another operand.
 */
export function selectiveStateUpdate(
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
  ssm: Tensor,
  s: ScanDims,
): void {
  const x = { u, delta, A, Bm, Cm, Dskip, bias, z };
  runForward(gpu, 'selectiveStateUpdate', x, out, ['ssm', ssm, [s.b, s.d, s.n]], s, 'fwd_carry');
}

/**
 * Either forward form: checks, the packed (A | Dskip | bias) scratch, then every chunk of `entry`
 * with `state` in binding 7 (the chunk-entry states of `fwd`, the carried h of `fwd_carry`).
 */
function runForward(
  gpu: Gpu,
  what: string,
  x: { u: Tensor; delta: Tensor; A: Tensor; Bm: Tensor; Cm: Tensor; Dskip: Tensor; bias: Tensor; z: Tensor | null },
  out: Tensor,
  [name, state, shape]: [string, Tensor, number[]],
  s: ScanDims,
  entry: 'fwd' | 'fwd_carry',
): void {
  checkInputs(what, s, { ...x, out });
  checkSize(what, name, state, shape);
  checkCpuN(what, gpu, s);
  checkDistinct(what, [['out', out], [name, state]], readOnly(x));
  const prm = packParams(gpu, x.A, x.Dskip, x.bias, s, 0, 'selective_scan.prm');
  try {
    const slots = { 0: x.u, 1: x.delta, 2: x.Bm, 3: x.Cm, 4: x.z ?? x.u, 5: prm, 6: out, 7: state };
    forwardChunks(gpu, s, slots, x.z !== null, entry);
  } finally {
    prm.release();
  }
}

/** The read-only operands by name, for checkDistinct (z left out when null). */
function readOnly(ts: Record<string, Tensor | null>): [string, Tensor][] {
  return Object.entries(ts).filter((e): e is [string, Tensor] => e[1] !== null);
}

/** @throws Error when N is over {@link SCAN_MAX_N_CPU} on a CPU adapter. */
export function checkCpuN(what: string, gpu: Gpu, s: ScanDims): void {
  if (gpu.isCpu && s.n > SCAN_MAX_N_CPU) {
    throw new Error(
      `${what}: state size n=${s.n} is over ${SCAN_MAX_N_CPU}, the most a CPU-adapter dispatch can loop over`,
    );
  }
}
