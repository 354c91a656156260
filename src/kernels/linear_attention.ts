/**
 * Chunked scalar-decay linear attention ("simple GLA"; fla-org/flash-linear-attention
 * `fla/ops/simple_gla`, docs/design.md#chunked-linear-attention-with-a-scalar-decay). RetNet (constant g), plain linear
 * attention (g = 0) and Mamba-2's SSD (g = Δ·A) are special cases. Per (batch, head):
 *   S_t = e^{g_t} S_{t−1} + k_tᵀ v_t (S is K×V, S_{−1} = 0),  o_t = scale · q_t S_t,
 * computed per chunk of {@link LA_CHUNK} rows from the chunk-boundary states h_n, which the
 * forward saves for the backward. Equations and loop trips: shaders/linear_attention.wgsl and
 * shaders/linear_attention_bwd.wgsl.
 *
 * Layouts: q, k (B, T, H·K) with head h at channels h·K … (h+1)·K − 1; v, o (B, T, H·V);
 * g (B, T, H), the log-decay (≤ 0; positive values are computed but may overflow); states
 * (B, H, N, K, V) with N = ⌈T / LA_CHUNK⌉.
 *
 * Dispatches: forward 3 (`la_local`, `la_scan`, `la_out`); backward 6 (`la_local`, `la_scan`,
 * `lb_dq`, `lb_dk`, `lb_dv`, `lb_dg`). The two sequential ones are split over dispatches when
 * they would pass {@link LA_LOOP_BUDGET}: `la_scan` past ≈ 500 chunks (T ≈ 16k at V = 128),
 * `lb_dg` past 34k rows. All kernels are barrier-free, one row or 4×4 block per invocation,
 * the same on every adapter.
 */
import { f32bits, type Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { specialise } from './shaders.ts';
import { grid1d } from './grid.ts';
import { checkDistinct, checkSize } from './attention_checks.ts';

/** Shapes of one linear-attention call: batch, sequence, heads, key and value head dims, output scale. */
export interface LinearAttentionDims {
  b: number;
  t: number;
  h: number;
  dk: number;
  dv: number;
  scale: number;
}

/**
 * Chunk length L. Per output row the kernels do K·V multiply-adds against the chunk's entering
 * state and on average L/2·(K + V) against the earlier rows of the chunk: L = 32 makes the two
 * equal at K = V = 32 and keeps the intra-chunk part ≤ the state part up to 128, while the saved
 * states (B·H·⌈T/L⌉·K·V floats, V/L times the size of q) stay small. An invocation then runs at
 * most ≈ 3.2k loop trips (K = V = 128), far under lavapipe's 65 535, so only the two sequential
 * loops ever need splitting over dispatches.
 */
export const LA_CHUNK = 32;

/** Largest K and V: the kernels keep one row of K or V in a private array of 32 vec4s. */
export const LA_MAX_HEAD_DIM = 128;

/**
 * Loop iterations one invocation may run per dispatch: lavapipe silently stops an invocation
 * after 65 535 (see flash_attention.ts); sequential loops are split to keep about half of that.
 */
export const LA_LOOP_BUDGET = 34000;

/** Test hook: when set, sequential loops take at most this many steps per dispatch on every adapter. */
export const laTuning: { steps: number | null } = { steps: null };

/** Steps per dispatch for a sequential loop of `trips` iterations per step. */
export function laSteps(trips: number): number {
  const forced = laTuning.steps;
  if (forced !== null) {
    if (!Number.isInteger(forced) || forced < 1) {
      throw new Error(`laTuning.steps must be a positive integer, got ${forced}`);
    }
    return forced;
  }
  return Math.max(1, Math.floor(LA_LOOP_BUDGET / trips));
}

const WG = 64;

/**
 * Checks dims (positive integers, K and V ≤ {@link LA_MAX_HEAD_DIM}, finite scale).
 * @throws Error naming the field that is wrong and what is allowed.
 */
export function checkLinearAttentionDims(what: string, d: LinearAttentionDims): void {
  for (const f of ['b', 't', 'h', 'dk', 'dv'] as const) {
    if (!Number.isInteger(d[f]) || d[f] < 1) {
      throw new Error(`${what}: dims.${f} must be a positive integer, got ${d[f]}`);
    }
  }
  if (d.dk > LA_MAX_HEAD_DIM || d.dv > LA_MAX_HEAD_DIM) {
    throw new Error(
      `${what}: head dims dk=${d.dk}, dv=${d.dv}; at most ${LA_MAX_HEAD_DIM} is supported`,
    );
  }
  if (!Number.isFinite(d.scale)) {
    throw new Error(`${what}: dims.scale must be finite, got ${d.scale}`);
  }
}

/** Shape of the saved chunk-boundary states: [B, H, ⌈T / LA_CHUNK⌉, K, V] (slot n = state entering chunk n). */
export function linearAttentionStateShape(d: LinearAttentionDims): number[] {
  return [d.b, d.h, Math.ceil(d.t / LA_CHUNK), d.dk, d.dv];
}

function params(d: LinearAttentionDims, lo: number, hi: number, flag: number): Uint32Array {
  const nc = Math.ceil(d.t / LA_CHUNK);
  // deno-fmt-ignore
  return new Uint32Array([
    d.b, d.t, d.h, d.dk, d.dv, nc, lo, hi,
    f32bits(d.scale), flag, Math.ceil(d.dk / 4), Math.ceil(d.dv / 4),
  ]);
}

function kernel(gpu: Gpu, file: 'linear_attention' | 'linear_attention_bwd', entry: string) {
  return {
    key: `${file}.${entry}`,
    code: specialise(gpu.shaders[file], { LC: `${LA_CHUNK}u` }),
    entryPoint: entry,
  };
}

/**
 * The chunk states: forward (mode 0) h_n into `st` from k, v; backward (mode 1) dh_n = ∂L/∂h_n
 * from q, dout. `la_local` in parallel over chunks, then `la_scan` over chunks in order.
 */
function chunkStates(
  gpu: Gpu,
  mode: 0 | 1,
  a: Tensor,
  c: Tensor,
  g: Tensor,
  st: Tensor,
  d: LinearAttentionDims,
): void {
  const nc = Math.ceil(d.t / LA_CHUNK);
  const slots = [a, c, g, st, undefined, undefined, undefined, undefined];
  const dv4 = Math.ceil(d.dv / 4);
  gpu.dispatch(
    kernel(gpu, 'linear_attention', 'la_local'),
    slots,
    params(d, 0, nc, mode),
    grid1d(d.b * d.h * nc * Math.ceil(d.dk / 4) * dv4, WG),
  );
  const scanSlots = [undefined, undefined, g, st, undefined, undefined, undefined, undefined];
  const step = laSteps(LA_CHUNK + dv4 + 2);
  const grid = grid1d(d.b * d.h * d.dk, WG);
  const ranges: [number, number][] = [];
  for (let lo = 0; lo < nc; lo += step) ranges.push([lo, Math.min(nc, lo + step)]);
  if (mode === 1) ranges.reverse();
  for (const [lo, hi] of ranges) {
    gpu.dispatch(
      kernel(gpu, 'linear_attention', 'la_scan'),
      scanSlots,
      params(d, lo, hi, mode),
      grid,
    );
  }
}

/**
 * Forward: o (B, T, H·V) = scale · q_t S_t for every row, and the states entering every chunk
 * (shape {@link linearAttentionStateShape}), both overwritten. q, k (B, T, H·K); v (B, T, H·V);
 * g (B, T, H) log-decay. Three dispatches (more for the chunk scan past ≈ 500 chunks).
 * @throws Error when a dim is invalid, a tensor's size or dtype does not match, or o/states
 *   shares a GPUBuffer with another operand.
 */
export function linearAttentionForward(
  gpu: Gpu,
  q: Tensor,
  k: Tensor,
  v: Tensor,
  g: Tensor,
  o: Tensor,
  states: Tensor,
  d: LinearAttentionDims,
): void {
  const what = 'linearAttentionForward';
  checkLinearAttentionDims(what, d);
  checkSize(what, 'q', q, [d.b, d.t, d.h * d.dk]);
  checkSize(what, 'k', k, [d.b, d.t, d.h * d.dk]);
  checkSize(what, 'v', v, [d.b, d.t, d.h * d.dv]);
  checkSize(what, 'g', g, [d.b, d.t, d.h]);
  checkSize(what, 'o', o, [d.b, d.t, d.h * d.dv]);
  checkSize(what, 'states', states, linearAttentionStateShape(d));
  checkDistinct(what, [['o', o], ['states', states]], [['q', q], ['k', k], ['v', v], ['g', g]]);
  chunkStates(gpu, 0, k, v, g, states, d);
  gpu.dispatch(
    kernel(gpu, 'linear_attention', 'la_out'),
    [undefined, undefined, g, states, q, k, v, o],
    params(d, 0, d.t, 0),
    grid1d(d.b * d.h * d.t, WG),
  );
}

/**
 * Backward: dq, dk (B, T, H·K), dv (B, T, H·V) and dg (B, T, H) ACCUMULATE (+=) the gradients
 * of L given dout = ∂L/∂o (B, T, H·V) and the `states` that {@link linearAttentionForward} saved
 * with the same inputs. Pooled scratch: dh (the states' shape) and 2·B·H·T + B·H floats for
 * the dg reverse cumsum, released once encoded. Six dispatches (more for long sequences).
 * @throws Error when a dim is invalid, a size or dtype does not match, or a gradient shares a
 *   GPUBuffer with another operand.
 */
export function linearAttentionBackward(
  gpu: Gpu,
  q: Tensor,
  k: Tensor,
  v: Tensor,
  g: Tensor,
  states: Tensor,
  dout: Tensor,
  dq: Tensor,
  dk: Tensor,
  dv: Tensor,
  dg: Tensor,
  d: LinearAttentionDims,
): void {
  const what = 'linearAttentionBackward';
  checkLinearAttentionDims(what, d);
  const qs = [d.b, d.t, d.h * d.dk];
  const vs = [d.b, d.t, d.h * d.dv];
  const gs = [d.b, d.t, d.h];
  checkSize(what, 'q', q, qs);
  checkSize(what, 'k', k, qs);
  checkSize(what, 'v', v, vs);
  checkSize(what, 'g', g, gs);
  checkSize(what, 'states', states, linearAttentionStateShape(d));
  checkSize(what, 'dout', dout, vs);
  checkSize(what, 'dq', dq, qs);
  checkSize(what, 'dk', dk, qs);
  checkSize(what, 'dv', dv, vs);
  checkSize(what, 'dg', dg, gs);
  checkDistinct(
    what,
    [['dq', dq], ['dk', dk], ['dv', dv], ['dg', dg]],
    [['q', q], ['k', k], ['v', v], ['g', g], ['states', states], ['dout', dout]],
  );
  const dh = gpu.empty(linearAttentionStateShape(d), 'f32', 'linear_attention.dh');
  const scr = gpu.empty([2 * d.b * d.h * d.t + d.b * d.h], 'f32', 'linear_attention.scr');
  try {
    chunkStates(gpu, 1, q, dout, g, dh, d);
    const rows = grid1d(d.b * d.h * d.t, WG);
    // `lb_dv` reads neither v nor the scratch, and binding what an entry point does not use is an error.
    const at = (
      st: Tensor,
      grad: Tensor,
      s: Tensor | undefined,
      vv: Tensor | undefined,
    ) => [q, k, vv, g, dout, st, grad, s];
    gpu.dispatch(
      kernel(gpu, 'linear_attention_bwd', 'lb_dq'),
      at(states, dq, scr, v),
      params(d, 0, d.t, 0),
      rows,
    );
    gpu.dispatch(
      kernel(gpu, 'linear_attention_bwd', 'lb_dk'),
      at(dh, dk, scr, v),
      params(d, 0, d.t, 0),
      rows,
    );
    gpu.dispatch(
      kernel(gpu, 'linear_attention_bwd', 'lb_dv'),
      at(dh, dv, undefined, undefined),
      params(d, 0, d.t, 0),
      rows,
    );
    const step = laSteps(1);
    const slots = [undefined, undefined, undefined, undefined, undefined, undefined, dg, scr];
    for (let hi = d.t; hi > 0; hi -= step) {
      const lo = Math.max(0, hi - step);
      gpu.dispatch(
        kernel(gpu, 'linear_attention_bwd', 'lb_dg'),
        slots,
        params(d, lo, hi, hi === d.t ? 1 : 0),
        grid1d(d.b * d.h, WG),
      );
    }
  } finally {
    dh.release();
    scr.release();
  }
}
