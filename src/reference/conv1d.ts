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
