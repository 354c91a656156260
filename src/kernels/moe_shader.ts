/**
 * How every MoE kernel module calls shaders/moe.wgsl: its entry points, its seven bindings and
 * 12-word params, the flag bits, and the argument checks they all make. Kept apart from the
 * routing (moe.ts) and the row gathers (moe_gather.ts) so both bind the one shader the same
 * way without either depending on the other.
 */
import { f32bits, type Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { grid1d } from './grid.ts';

type Entry =
  | 'softmax_fwd'
  | 'softmax_bwd'
  | 'topk'
  | 'gates_fwd'
  | 'gates_bwd'
  | 'fill_i32'
  | 'assign'
  | 'gather_rows'
  | 'gather_sum'
  | 'row_dots'
  | 'group_colsum'
  | 'aux_fwd'
  | 'aux_bwd';

/** Tokens one `assign` / `group_colsum` dispatch walks per invocation (lavapipe's 65 535-iteration cap). */
export const TOKENS_PER_DISPATCH = 16384;

interface Bind {
  fa?: Tensor;
  fb?: Tensor;
  ia?: Tensor;
  fout?: Tensor;
  iout?: Tensor;
  iout2?: Tensor;
  icnt?: Tensor;
}

interface P {
  n?: number;
  c?: number;
  k?: number;
  e?: number;
  j?: number;
  n0?: number;
  n1?: number;
  gs?: number;
  cap?: number;
  rows?: number;
  flags?: number;
  alpha?: number;
}

/** Bits of the params' flags word. */
export const ACC = 1, WEIGHTED = 2, RENORM = 4, PREV_AUX = 8;

/** Dispatches `entry` over `count` invocations; unbound slots stay empty, unset params 0 (k and gs 1). */
export function run(gpu: Gpu, entry: Entry, b: Bind, p: P, count: number): void {
  gpu.dispatch(
    { key: `moe.${entry}`, code: gpu.shaders.moe, entryPoint: entry },
    [b.fa, b.fb, b.ia, b.fout, b.iout, b.iout2, b.icnt],
    new Uint32Array([
      p.n ?? 0,
      p.c ?? 0,
      p.k ?? 1,
      p.e ?? 0,
      p.j ?? 0,
      p.n0 ?? 0,
      p.n1 ?? 0,
      p.gs ?? 1,
      p.cap ?? 0,
      p.rows ?? 0,
      p.flags ?? 0,
      f32bits(p.alpha ?? 0),
    ]),
    grid1d(count, 64),
  );
}

/** @throws Error unless t holds `size` elements (laid out as `shape`) of `dtype`. */
export function need(fn: string, name: string, t: Tensor, size: number, dtype: 'f32' | 'i32', shape: string): void {
  if (t.size !== size) {
    throw new Error(`${fn}: ${name} [${t.shape}] must hold ${shape} = ${size} elements, got ${t.size}`);
  }
  if (t.dtype !== dtype) throw new Error(`${fn}: ${name} must be ${dtype}, got ${t.dtype}`);
}

/** @throws Error unless every one of `dims` is a positive integer. */
export function positive(fn: string, dims: Record<string, number>): void {
  for (const [k, v] of Object.entries(dims)) {
    if (!Number.isInteger(v) || v < 1) throw new Error(`${fn}: ${k} must be a positive integer, got ${v}`);
  }
}
