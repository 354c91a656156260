/**
 * Exact top-k per row, for top-k attention at inference (arXiv 2502.06766: each query attends to
 * its k largest scores only): {@link topkMask} keeps the k
 * largest live entries of each row, ties going to the lower index, and writes −∞ over the rest,
 * so a softmax after it gives them probability exactly 0. A radix select on each value's
 * order-preserving key (shaders/select_k.wgsl) finds the k-th largest without sorting;
 * docs/design.md#top-k-attention-at-inference says how.
 */
import type { Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { grid1d } from './grid.ts';

/** Which entries of a row are live: all n, or (causal) entries 0 … r mod n of row r. */
export interface SelectKDims {
  rows: number;
  n: number;
  k: number;
  causal?: boolean;
}

/**
 * In place over x (rows, n) f32: keeps the k largest live entries of each row (all of them
 * when a row has k or fewer), ties broken towards the lower index, and writes −∞ over the other
 * live entries; entries past a causal row's live length are not touched. Two dispatches: one
 * workgroup per row selects, one invocation per row masks.
 * @throws Error when a dim is not a positive integer, or x is not (rows, n) f32.
 */
export function topkMask(gpu: Gpu, x: Tensor, d: SelectKDims): void {
  for (const [name, v] of Object.entries({ rows: d.rows, n: d.n, k: d.k })) {
    if (!Number.isInteger(v) || v < 1) throw new Error(`topkMask: ${name} must be a positive integer, got ${v}`);
  }
  if (x.dtype !== 'f32' || x.size !== d.rows * d.n) {
    throw new Error(`topkMask: x must be (rows ${d.rows}, n ${d.n}) f32, got [${x.shape}] ${x.dtype}`);
  }
  const sel = gpu.empty([d.rows, 2], 'u32', 'select_k.sel');
  try {
    const params = new Uint32Array([d.rows, d.n, d.k, d.causal ? 1 : 0]);
    const code = gpu.shaders.select_k;
    const y = Math.ceil(d.rows / 65535);
    gpu.dispatch({ key: 'select_k.select', code, entryPoint: 'select_k' }, [x, sel], params, [
      Math.ceil(d.rows / y),
      y,
    ]);
    gpu.dispatch({ key: 'select_k.mask', code, entryPoint: 'mask' }, [x, sel], params, grid1d(d.rows, 64));
  } finally {
    sel.release();
  }
}
