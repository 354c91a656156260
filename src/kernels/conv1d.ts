/**
 * Causal depthwise conv1d of the Mamba block (Gu & Dao 2023, arXiv 2312.00752; state-spaces/mamba
 * `mamba_simple.py`, Dao-AILab/causal-conv1d): x (B, T, D), weight (D, K), bias (D),
 * y_t[d] = bias[d] + Σ_{j<K} w[d, j] · x_{t−K+1+j}[d], with x = 0 before t = 0 (no padding
 * buffer: taps that reach before the sequence start are skipped).
 *
 * The backward sums dw and dbias over B·T without float atomics: one pass writes a partial per
 * (block of rows, channel) into a pooled scratch, a second sums the blocks
 * (docs/design.md#webgpu-limits-that-shape-the-kernels).
 */
import type { Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { checkDistinct, checkSize } from './attention_checks.ts';
import { specialise } from './shaders.ts';
import { grid1d } from './grid.ts';

/** Shapes of one conv1d call: batch, sequence length, channels, kernel width. */
export interface Conv1dDims {
  b: number;
  t: number;
  d: number;
  k: number;
}

/** Widest kernel: `bwd_part` keeps K partial sums per invocation in a private array. */
export const CONV1D_MAX_K = 64;

/**
 * Loop iterations one invocation may run per dispatch on CPU adapters: lavapipe silently stops
 * an invocation after 65 535 (see flash_attention.ts's CPU_LOOP_BUDGET).
 */
const CPU_LOOP_BUDGET = 34000;

/** Most row blocks `bwd_reduce` sums per invocation. */
const MAX_BLOCKS = 8192;

const WG = 64;

function checkDims(what: string, c: Conv1dDims): void {
  for (const key of ['b', 't', 'd', 'k'] as const) {
    if (!Number.isInteger(c[key]) || c[key] < 1) {
      throw new Error(`${what}: dims.${key} must be a positive integer, got ${c[key]}`);
    }
  }
  if (c.k > CONV1D_MAX_K) throw new Error(`${what}: kernel width k=${c.k} is over the supported ${CONV1D_MAX_K}`);
}

type Entry = 'fwd' | 'bwd_dx' | 'bwd_part' | 'bwd_reduce' | 'fwd_carry' | 'carry_shift';

function run(
  gpu: Gpu,
  entry: Entry,
  c: Conv1dDims,
  slots: (Tensor | undefined)[],
  items: number,
  blocks = { rpb: 1, nblk: 1 },
): void {
  const code = specialise(gpu.shaders.conv1d, { K: `${c.k}u` });
  const rows = c.b * c.t;
  const bindings: (Tensor | undefined)[] = new Array(9).fill(undefined); // the uniform is binding 9
  slots.forEach((t, i) => (bindings[i] = t));
  gpu.dispatch(
    { key: `conv1d.${entry}.k${c.k}`, code, entryPoint: entry },
    bindings,
    new Uint32Array([c.b, c.t, c.d, rows, blocks.rpb, blocks.nblk, 0, 0]),
    grid1d(items, WG),
  );
}

/** Either forward's checks: dims, x / w / bias / y shapes, and y (and `writable`) apart from the inputs. */
function checkForward(
  what: string,
  x: Tensor,
  w: Tensor,
  bias: Tensor,
  y: Tensor,
  c: Conv1dDims,
  writable: [string, Tensor][],
): void {
  checkDims(what, c);
  checkSize(what, 'x', x, [c.b, c.t, c.d]);
  checkSize(what, 'w', w, [c.d, c.k]);
  checkSize(what, 'bias', bias, [c.d]);
  checkSize(what, 'y', y, [c.b, c.t, c.d]);
  checkDistinct(what, [['y', y], ...writable], [['x', x], ['w', w], ['bias', bias]]);
}

/**
 * y (B, T, D) = causal depthwise conv of x (B, T, D) with w (D, K), plus bias (D). Every element
 * of y is written; one dispatch.
 * @throws Error when a dimension is not a positive integer, k is over {@link CONV1D_MAX_K}, a
 *   tensor's size or dtype does not match `c`, or y shares a GPUBuffer with an input.
 */
export function conv1dForward(gpu: Gpu, x: Tensor, w: Tensor, bias: Tensor, y: Tensor, c: Conv1dDims): void {
  checkForward('conv1dForward', x, w, bias, y, c, []);
  run(gpu, 'fwd', c, [x, w, bias, undefined, y], c.b * c.t * c.d);
}

/**
 * The decoding form (causal_conv1d_update; docs/design.md#decoding-state-of-the-recurrent-layers): y (B, T, D) = causal
 * depthwise conv of window ++ x, where window (B, K−1, D) holds the K−1 inputs before x's first token (oldest first;
 * zeros before a sequence's start), and window is then overwritten with the last K−1 inputs of window ++ x. Passes over
 * a sequence in pieces, carrying the window, give {@link conv1dForward}'s output on the whole. Two dispatches; no
 * gradient.
 * @throws Error as {@link conv1dForward}, for k < 2 (nothing to carry: use conv1dForward), a
 *   window that is not (B, K−1, D) f32, or a window that shares a GPUBuffer with another operand.
 */
export function conv1dCarryForward(
  gpu: Gpu,
  x: Tensor,
  w: Tensor,
  bias: Tensor,
  window: Tensor,
  y: Tensor,
  c: Conv1dDims,
): void {
  const what = 'conv1dCarryForward';
  checkDims(what, c);
  if (c.k < 2) throw new Error(`${what}: kernel width k=${c.k} carries no window (k ≥ 2); use conv1dForward`);
  checkSize(what, 'window', window, [c.b, c.k - 1, c.d]);
  checkForward(what, x, w, bias, y, c, [['window', window]]);
  const at8 = (slots: (Tensor | undefined)[]) => [...slots, ...new Array(8 - slots.length).fill(undefined), window];
  run(gpu, 'fwd_carry', c, at8([x, w, bias, undefined, y]), c.b * c.t * c.d);
  // After fwd_carry in encoding order: WebGPU orders the two dispatches' accesses to window.
  run(gpu, 'carry_shift', c, at8([x]), c.b * c.d);
}

/**
 * Accumulates the conv1d gradients given dy (B, T, D): dx (B, T, D) += ∂L/∂x, dw (D, K) +=
 * Σ_{b,t} dy_t · x_{t−K+1+j}, dbias (D) += Σ_{b,t} dy_t. Three dispatches and a pooled
 * (blocks, D, K + 1) scratch, released once encoded.
 * @throws Error as {@link conv1dForward}, when an output shares a GPUBuffer with another
 *   operand, or (CPU adapters) when B·T is too long for the per-invocation loop budget.
 */
export function conv1dBackward(
  gpu: Gpu,
  x: Tensor,
  w: Tensor,
  dy: Tensor,
  dx: Tensor,
  dw: Tensor,
  dbias: Tensor,
  c: Conv1dDims,
): void {
  const what = 'conv1dBackward';
  checkDims(what, c);
  checkSize(what, 'x', x, [c.b, c.t, c.d]);
  checkSize(what, 'w', w, [c.d, c.k]);
  checkSize(what, 'dy', dy, [c.b, c.t, c.d]);
  checkSize(what, 'dx', dx, [c.b, c.t, c.d]);
  checkSize(what, 'dw', dw, [c.d, c.k]);
  checkSize(what, 'dbias', dbias, [c.d]);
  checkDistinct(what, [['dx', dx], ['dw', dw], ['dbias', dbias]], [['x', x], ['w', w], ['dy', dy]]);

  const rows = c.b * c.t;
  // Blocks of at least 128 rows, and few enough blocks for one reduce invocation to sum.
  const rpb = Math.max(128, Math.ceil(rows / MAX_BLOCKS));
  if (gpu.isCpu && rpb * (c.k + 2) > CPU_LOOP_BUDGET) {
    throw new Error(`${what}: B·T = ${rows} rows at k=${c.k} is over what one CPU-adapter dispatch can loop over`);
  }
  const nblk = Math.ceil(rows / rpb);
  run(gpu, 'bwd_dx', c, [undefined, w, undefined, dy, dx], rows * c.d);
  const part = gpu.empty([nblk, c.d, c.k + 1], 'f32', 'conv1d.part');
  try {
    run(gpu, 'bwd_part', c, [x, undefined, undefined, dy, undefined, part], nblk * c.d, { rpb, nblk });
    run(
      gpu,
      'bwd_reduce',
      c,
      [undefined, undefined, undefined, undefined, undefined, part, dw, dbias],
      c.d * (c.k + 1),
      {
        rpb,
        nblk,
      },
    );
  } finally {
    part.release();
  }
}
