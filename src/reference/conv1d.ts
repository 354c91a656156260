/**
 * f64 reference for the Mamba block's causal depthwise conv1d (Gu & Dao 2023; state-spaces/mamba
 * `mamba_simple.py`, `causal_conv1d_fn`): x (B, T, D), weight (D, K), bias (D),
 * y_t[d] = bias[d] + Σ_{j<K} w[d, j] · x_{t−K+1+j}[d], with x = 0 before t = 0. Test-only.
 */
import type { Conv1dDims } from '../kernels/conv1d.ts';

/** y (B, T, D). */
export function conv1dRef(x: Float64Array, w: Float64Array, bias: Float64Array, c: Conv1dDims): Float64Array {
  const { b: nb, t: nt, d: nd, k: nk } = c;
  const y = new Float64Array(nb * nt * nd);
  for (let b = 0; b < nb; b++) {
    for (let t = 0; t < nt; t++) {
      for (let d = 0; d < nd; d++) {
        let acc = bias[d];
        for (let j = 0; j < nk; j++) {
          const s = t - nk + 1 + j;
          if (s >= 0) acc += w[d * nk + j] * x[(b * nt + s) * nd + d];
        }
        y[(b * nt + t) * nd + d] = acc;
      }
    }
  }
  return y;
}

/**
 * The decoding form (docs/design.md#decoding-state-of-the-recurrent-layers): y (B, T, D) of the conv over window ++ x,
 * where window (B, K−1, D) holds the K−1 inputs before x (oldest first), and the next window: the last K−1 inputs of
 * window ++ x.
 */
export function conv1dCarryRef(
  x: Float64Array,
  w: Float64Array,
  bias: Float64Array,
  window: Float64Array,
  c: Conv1dDims,
): { y: Float64Array; window: Float64Array } {
  const { b: nb, t: nt, d: nd, k: nk } = c, W = nk - 1, tt = W + nt;
  // The concatenation window ++ x as one (B, K−1+T, D) sequence, whose conv from zeros gives y at its last T rows.
  const cat = new Float64Array(nb * tt * nd);
  for (let b = 0; b < nb; b++) {
    cat.set(window.subarray(b * W * nd, (b + 1) * W * nd), b * tt * nd);
    cat.set(x.subarray(b * nt * nd, (b + 1) * nt * nd), (b * tt + W) * nd);
  }
  const full = conv1dRef(cat, w, bias, { ...c, t: tt });
  const y = new Float64Array(nb * nt * nd), next = new Float64Array(nb * W * nd);
  for (let b = 0; b < nb; b++) {
    y.set(full.subarray((b * tt + W) * nd, (b + 1) * tt * nd), b * nt * nd);
    next.set(cat.subarray((b * tt + nt) * nd, (b + 1) * tt * nd), b * W * nd);
  }
  return { y, window: next };
}

/** Gradients of Σ dy ∘ y: dx (B, T, D), dw (D, K), dbias (D). */
export function conv1dBackwardRef(
  x: Float64Array,
  w: Float64Array,
  dy: Float64Array,
  c: Conv1dDims,
): { dx: Float64Array; dw: Float64Array; dbias: Float64Array } {
  const { b: nb, t: nt, d: nd, k: nk } = c;
  const dx = new Float64Array(nb * nt * nd);
  const dw = new Float64Array(nd * nk);
  const dbias = new Float64Array(nd);
  for (let b = 0; b < nb; b++) {
    for (let t = 0; t < nt; t++) {
      for (let d = 0; d < nd; d++) {
        const g = dy[(b * nt + t) * nd + d];
        dbias[d] += g;
        for (let j = 0; j < nk; j++) {
          const s = t - nk + 1 + j;
          if (s < 0) continue;
          dx[(b * nt + s) * nd + d] += w[d * nk + j] * g;
          dw[d * nk + j] += x[(b * nt + s) * nd + d] * g;
        }
      }
    }
  }
  return { dx, dw, dbias };
}
