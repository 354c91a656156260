/**
 * f64 LayerNorm reference (Ba et al., arXiv 1607.06450; llm.c train_gpt2.c
 * layernorm_forward / layernorm_backward) for the kernel tests (docs/design.md#kernel-references-and-test-cases).
 */

/** Forward of x (N, C) with gain w (C) and bias b (C): y (N, C), mean (N), rstd (N). */
export function layerNormRef(
  x: Float64Array,
  w: Float64Array,
  b: Float64Array,
  n: number,
  c: number,
  eps = 1e-5,
): { y: Float64Array; mean: Float64Array; rstd: Float64Array } {
  const y = new Float64Array(n * c);
  const mean = new Float64Array(n);
  const rstd = new Float64Array(n);
  for (let r = 0; r < n; r++) {
    const o = r * c;
    let m = 0;
    for (let i = 0; i < c; i++) m += x[o + i];
    m /= c;
    let v = 0;
    for (let i = 0; i < c; i++) v += (x[o + i] - m) ** 2;
    const s = 1 / Math.sqrt(v / c + eps);
    for (let i = 0; i < c; i++) y[o + i] = (x[o + i] - m) * s * w[i] + b[i];
    mean[r] = m;
    rstd[r] = s;
  }
  return { y, mean, rstd };
}

/**
 * Gradients of Σ y∘dy with respect to x, w and b (not accumulated: fresh arrays).
 * dx = rstd·(w·dy − mean_C(w·dy) − xhat·mean_C(w·dy·xhat)), dw = Σ_rows dy·xhat, db = Σ_rows dy.
 */
export function layerNormBackwardRef(
  x: Float64Array,
  w: Float64Array,
  dy: Float64Array,
  n: number,
  c: number,
  eps = 1e-5,
): { dx: Float64Array; dw: Float64Array; db: Float64Array } {
  const { mean, rstd } = layerNormRef(x, w, new Float64Array(c), n, c, eps);
  const dx = new Float64Array(n * c);
  const dw = new Float64Array(c);
  const db = new Float64Array(c);
  for (let r = 0; r < n; r++) {
    const o = r * c;
    let a = 0;
    let bb = 0;
    for (let i = 0; i < c; i++) {
      const xhat = (x[o + i] - mean[r]) * rstd[r];
      const g = w[i] * dy[o + i];
      a += g;
      bb += g * xhat;
      dw[i] += dy[o + i] * xhat;
      db[i] += dy[o + i];
    }
    a /= c;
    bb /= c;
    for (let i = 0; i < c; i++) {
      const xhat = (x[o + i] - mean[r]) * rstd[r];
      dx[o + i] = (w[i] * dy[o + i] - a - xhat * bb) * rstd[r];
    }
  }
  return { dx, dw, db };
}
