/**
 * The row gathers of mixture-of-experts layers (shaders/moe.wgsl): tokens into their expert
 * slots, slot rows back into tokens weighted by the combine gates, the gate gradient's row dots,
 * and a host-indexed scatter-add. They move rows along an index that the routing (moe.ts)
 * computed and never look at how it was chosen, so they live apart from it.
 *
 * Every scatter-add is written as a gather over the inverse index (token → its k slots, or slot
 * → its token), so repeated targets need no atomics. The backward passes call them with
 * `accumulate` (+=).
 */
import type { Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { ACC, need, positive, run, WEIGHTED } from './moe_shader.ts';

/** Options of the row gathers. */
export interface GatherOptions {
  /** Per-source weights: w[index[s]] for {@link gatherRows}, w[n·k+j] for {@link gatherSumRows}. */
  weights?: Tensor;
  /** out += instead of out =. */
  accumulate?: boolean;
}

/**
 * out (S, C) (+)= w[index[s]] · x[index[s] / div] for index[s] ≥ 0, else 0; x (M, C), index (S) i32.
 * With div = k it maps slots back to tokens through slotSrc (n·k + j).
 * @throws Error on a size or dtype mismatch.
 */
export function gatherRows(
  gpu: Gpu,
  x: Tensor,
  index: Tensor,
  out: Tensor,
  c: number,
  div = 1,
  o: GatherOptions = {},
): void {
  positive('gatherRows', { c, div });
  const s = index.size;
  if (x.size % c) throw new Error(`gatherRows: x [${x.shape}] is not (M, C=${c})`);
  need('gatherRows', 'index', index, s, 'i32', '(S)');
  need('gatherRows', 'out', out, s * c, 'f32', `(S=${s}, C=${c})`);
  const flags = (o.accumulate ? ACC : 0) | (o.weights ? WEIGHTED : 0);
  // fb is statically used by the entry point, so it is bound even when unweighted (x, read-only).
  run(gpu, 'gather_rows', { fa: x, fb: o.weights ?? x, ia: index, fout: out }, { n: s, c, k: div, flags }, s * c);
}

/**
 * out (N, C) (+)= Σ_j w[n·k+j] · src[index[n·k+j]] over index ≥ 0; src (S, C), index (N, k) i32.
 * The scatter-add of slot rows into tokens, run as a gather over the token → slot index.
 * @throws Error on a size or dtype mismatch.
 */
export function gatherSumRows(
  gpu: Gpu,
  src: Tensor,
  index: Tensor,
  out: Tensor,
  n: number,
  k: number,
  c: number,
  o: GatherOptions = {},
): void {
  positive('gatherSumRows', { n, k, c });
  if (src.size % c) throw new Error(`gatherSumRows: src [${src.shape}] is not (S, C=${c})`);
  need('gatherSumRows', 'index', index, n * k, 'i32', '(N, k)');
  need('gatherSumRows', 'out', out, n * c, 'f32', '(N, C)');
  if (o.weights) need('gatherSumRows', 'weights', o.weights, n * k, 'f32', '(N, k)');
  const flags = (o.accumulate ? ACC : 0) | (o.weights ? WEIGHTED : 0);
  run(gpu, 'gather_sum', { fa: src, fb: o.weights ?? src, ia: index, fout: out }, { n, c, k, flags }, n * c);
}

/** out (N, k) (+)= ⟨a[n], src[index[n·k+j]]⟩ (0 where index < 0); a (N, C), src (S, C). */
export function rowDots(
  gpu: Gpu,
  a: Tensor,
  src: Tensor,
  index: Tensor,
  out: Tensor,
  n: number,
  k: number,
  c: number,
  accumulate = true,
): void {
  positive('rowDots', { n, k, c });
  need('rowDots', 'a', a, n * c, 'f32', '(N, C)');
  need('rowDots', 'index', index, n * k, 'i32', '(N, k)');
  need('rowDots', 'out', out, n * k, 'f32', '(N, k)');
  if (src.size % c) throw new Error(`rowDots: src [${src.shape}] is not (S, C=${c})`);
  run(gpu, 'row_dots', { fa: a, fb: src, ia: index, fout: out }, { n, c, k, flags: accumulate ? ACC : 0 }, n * k);
}

/**
 * out (N, C) += Σ_{s: index[s] = n} w[s] · src[s] for a host index (S) with repeated targets:
 * the index is inverted on the host (a stable sort by target, then segments padded to the
 * longest) and the sum runs as {@link gatherSumRows}, so no atomics are needed.
 * @throws Error when an index is outside −1 … N−1 or sizes disagree.
 */
export function scatterAddRows(
  gpu: Gpu,
  src: Tensor,
  index: Int32Array,
  out: Tensor,
  n: number,
  c: number,
  weights?: Float32Array,
): void {
  const s = index.length;
  need('scatterAddRows', 'src', src, s * c, 'f32', `(S=${s}, C=${c})`);
  if (weights && weights.length !== s) throw new Error(`scatterAddRows: ${weights.length} weights for ${s} rows`);
  const lists: number[][] = Array.from({ length: n }, () => []);
  index.forEach((t, i) => {
    if (!Number.isInteger(t) || t < -1 || t >= n) {
      throw new Error(`scatterAddRows: index[${i}] = ${t} is outside −1 … ${n - 1}`);
    }
    if (t >= 0) lists[t].push(i);
  });
  const k = Math.max(1, ...lists.map((l) => l.length));
  const inv = new Int32Array(n * k).fill(-1);
  const w = new Float32Array(n * k);
  lists.forEach((l, t) =>
    l.forEach((i, j) => {
      inv[t * k + j] = i;
      w[t * k + j] = weights ? weights[i] : 1;
    })
  );
  const invT = gpu.upload(inv, [n, k], 'i32', 'scatter.inverse');
  const wT = gpu.upload(w, [n, k], 'f32', 'scatter.weights');
  gatherSumRows(gpu, src, invT, out, n, k, c, { weights: wT, accumulate: true });
  invT.release();
  wT.release();
}
