/**
 * Top-k sparsification (shaders/compress_topk.wgsl): the k values of largest |x|, ties to the
 * lower index, sent as (index u32, value f32) pairs in increasing index order; the receiver
 * scatters them into zeros. Exact selection by a 4-round radix select on the bits of |x|, then
 * an ordered compaction: O(n) work in 12 dispatches. Meant for {@link ErrorFeedback} (Stich et
 * al., "Sparsified SGD with memory", arXiv 1809.07599): what is not selected stays in the residual.
 */
import type { Gpu } from '../../gpu/context.ts';
import type { Tensor } from '../../gpu/tensor.ts';
import { grid1d } from '../grid.ts';
import { checkCount, checkParts, checkTensor, type Compressed, type Compressor } from './compressor.ts';

/** Elements per workgroup of the count and emit passes (CHUNK in the shader). */
const CHUNK = 1024;
/** The scan walks the chunks in one invocation: lavapipe stops an invocation after 65 535 loop steps. */
export const TOPK_MAX_N = 60000 * CHUNK;

/**
 * indices (k u32) and values (k f32) of the k = indices.size elements of x (n, f32) with the
 * largest |x|, ties to the lower index, in increasing index order. 1 ≤ k ≤ n ≤ {@link TOPK_MAX_N}.
 * @throws Error when k is out of range, n is too large, or a dtype or size is wrong.
 */
export function topKSelect(gpu: Gpu, x: Tensor, indices: Tensor, values: Tensor): void {
  const n = x.size, k = indices.size;
  checkTensor('topKSelect', 'x', x, 'f32', n);
  if (n > TOPK_MAX_N) throw new Error(`topKSelect: n = ${n} is over the ${TOPK_MAX_N} elements one call handles`);
  if (!Number.isInteger(k) || k < 1 || k > n) throw new Error(`topKSelect: k must be in [1, n = ${n}], got ${k}`);
  checkTensor('topKSelect', 'indices', indices, 'u32', k);
  checkTensor('topKSelect', 'values', values, 'f32', k);
  const chunks = Math.ceil(n / CHUNK);
  const hist = gpu.empty([256], 'u32', 'topk.hist');
  const sel = gpu.empty([2 + 2 * chunks], 'u32', 'topk.sel');
  // Each entry point's layout holds only the bindings it uses: x, hist, sel, indices, values.
  const uses: Record<string, string> = {
    init: '.HS..',
    histogram: 'XHS..',
    pick: '.HS..',
    count: 'X.S..',
    scan: '..S..',
    emit: 'X.SIV',
  };
  const run = (entry: string, groups: readonly number[], shift = 0, mask = 0, rowGroups = 0) =>
    gpu.dispatch(
      { key: `compress.topk.${entry}`, code: gpu.shaders.compress_topk, entryPoint: entry },
      [x, hist, sel, indices, values, undefined].map((t, i) => (uses[entry][i] === '.' ? undefined : t)),
      new Uint32Array([n, k, shift, mask, rowGroups, 0, 0, 0]),
      groups,
    );
  run('init', [1]);
  // At most 256 workgroups striding over x: few atomic merges, ≤ n / 65 536 steps per invocation.
  const histGroups = Math.min(256, Math.ceil(n / (256 * 16)));
  for (let round = 0; round < 4; round++) {
    const shift = 24 - 8 * round;
    const mask = round === 0 ? 0 : (0xffffffff << (shift + 8)) >>> 0;
    run('histogram', [histGroups], shift, mask);
    run('pick', [1], shift);
  }
  const g = grid1d(chunks * 256, 256);
  run('count', g, 0, 0, g[0]);
  run('scan', [1]);
  run('emit', g, 0, 0, g[0]);
  hist.release();
  sel.release();
}

/**
 * y (n, f32) = 0 except y[indices[j]] = values[j]: the dense form of a top-k message.
 * @throws Error on wrong dtypes or sizes (indices are not range-checked: they come from {@link topKSelect}).
 */
export function topKScatter(gpu: Gpu, indices: Tensor, values: Tensor, y: Tensor): void {
  const k = indices.size;
  checkTensor('topKScatter', 'y', y, 'f32', y.size);
  checkTensor('topKScatter', 'indices', indices, 'u32', k);
  checkTensor('topKScatter', 'values', values, 'f32', k);
  gpu.clear(y);
  const g = grid1d(k, 256);
  gpu.dispatch(
    { key: 'compress.topk.scatter', code: gpu.shaders.compress_topk, entryPoint: 'scatter' },
    [undefined, undefined, undefined, indices, values, y],
    new Uint32Array([y.size, k, 0, 0, g[0], 0, 0, 0]),
    g,
  );
}

/**
 * k for n values: `k` itself when given as a count, ⌈density·n⌉ (at least 1) for a density.
 * @throws Error when the count is not an integer in [1, n] or the density is not in (0, 1].
 */
export function topKCount(n: number, opt: { k: number } | { density: number }): number {
  if ('k' in opt) {
    if (!Number.isInteger(opt.k) || opt.k < 1 || opt.k > n) {
      throw new Error(`topk: k must be an integer in [1, n = ${n}], got ${opt.k}`);
    }
    return opt.k;
  }
  if (!(opt.density > 0 && opt.density <= 1)) throw new Error(`topk: density must be in (0, 1], got ${opt.density}`);
  return Math.max(1, Math.ceil(opt.density * n));
}

/**
 * The top-k compressor, k fixed or a density of n: parts [indices u32 (k), values f32 (k)];
 * wire bytes 8k.
 * @throws Error for a density outside (0, 1]; a count outside [1, n] throws at allocate.
 */
export function topKCompressor(opt: { k: number } | { density: number }): Compressor {
  if ('density' in opt) topKCount(1, opt);
  const parts = (fn: string, c: Compressed, n: number) => {
    if (c.n !== n) throw new Error(`${fn}: message of ${c.n} values, tensor has ${n}`);
    const k = topKCount(n, opt);
    checkParts(fn, c, [['indices', 'u32', k], ['values', 'f32', k]]);
  };
  return {
    name: 'k' in opt ? `topk:k=${opt.k}` : `topk:${opt.density}`,
    allocate(gpu: Gpu, n: number): Compressed {
      checkCount('topk.allocate', n);
      const k = topKCount(n, opt);
      return { n, parts: [gpu.empty([k], 'u32', 'topk.indices'), gpu.empty([k], 'f32', 'topk.values')] };
    },
    compress(gpu: Gpu, x: Tensor, c: Compressed): void {
      parts('topk.compress', c, x.size);
      topKSelect(gpu, x, c.parts[0], c.parts[1]);
    },
    decompress(gpu: Gpu, c: Compressed, y: Tensor): void {
      parts('topk.decompress', c, y.size);
      topKScatter(gpu, c.parts[0], c.parts[1], y);
    },
    wireBytes: (n: number) => 8 * topKCount(n, opt),
  };
}
