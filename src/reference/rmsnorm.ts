/**
 * f64 RMSNorm reference (Zhang & Sennrich, arXiv 1910.07467; state-spaces/mamba
 * rms_norm_ref) for the kernel and autograd tests (docs/design.md#kernel-references-and-test-cases).
 */

/** Forward of x (N, C) with gain w (C): y (N, C) = x·rstd·w and rstd (N) = 1/√(Σx²/C + eps). */
export function rmsNormRef(
  x: Float64Array,
  w: Float64Array,
  n: number,
  c: number,
  eps = 1e-5,
): { y: Float64Array; rstd: Float64Array } {
  const y = new Float64Array(n * c);
  const rstd = new Float64Array(n);
  for (let r = 0; r < n; r++) {
    const o = r * c;
    let ss = 0;
    for (let i = 0; i < c; i++) ss += x[o + i] * x[o + i];
    const s = 1 / Math.sqrt(ss / c + eps);
    for (let i = 0; i < c; i++) y[o + i] = x[o + i] * s * w[i];
    rstd[r] = s;
  }
  return { y, rstd };
}

/**
 * Gradients of Σ y∘dy with respect to x (N, C) and w (C) (fresh arrays, not accumulated):
 * dx = rstd·(w·dy − xhat·mean_C(w·dy·xhat)), dw = Σ_rows dy·xhat, with xhat = x·rstd.
 */
export function rmsNormBackwardRef(
  x: Float64Array,
  w: Float64Array,
  dy: Float64Array,
  n: number,
  c: number,
  eps = 1e-5,
): { dx: Float64Array; dw: Float64Array } {
  const { rstd } = rmsNormRef(x, w, n, c, eps);
  const dx = new Float64Array(n * c);
  const dw = new Float64Array(c);
  for (let r = 0; r < n; r++) {
    const o = r * c;
    let m = 0;
    for (let i = 0; i < c; i++) {
      const xhat = x[o + i] * rstd[r];
      m += w[i] * dy[o + i] * xhat;
      dw[i] += dy[o + i] * xhat;
    }
    m /= c;
    for (let i = 0; i < c; i++) {
      dx[o + i] = (w[i] * dy[o + i] - x[o + i] * rstd[r] * m) * rstd[r];
    }
  }
  return { dx, dw };
}
