/**
 * f64 references for the optimizer kernels (docs/design.md#kernel-references-and-test-cases test standard): the global
 * gradient norm with clip scale of torch.nn.utils.clip_grad_norm_, one torch.optim.AdamW step and one SGD step.
 */

/** [‖g‖₂, clip scale = min(1, maxNorm / (‖g‖₂ + 1e-6))], scale 1 when maxNorm ≤ 0. */
export function gradNormRef(g: ArrayLike<number>, maxNorm: number): [number, number] {
  let s = 0;
  for (let i = 0; i < g.length; i++) s += g[i] * g[i];
  const norm = Math.sqrt(s);
  return [norm, maxNorm > 0 ? Math.min(1, maxNorm / (norm + 1e-6)) : 1];
}

/**
 * One AdamW step in place on p, m, v (torch.optim.AdamW, single-tensor path): the gradient is
 * scaled by `clip`, weight decay is decoupled (p ← p(1 − lr·wd)), and the Adam step is
 * bias-corrected with t = `step` ≥ 1.
 */
export function adamwStepRef(
  p: Float64Array,
  g: ArrayLike<number>,
  m: Float64Array,
  v: Float64Array,
  h: { lr: number; beta1: number; beta2: number; eps: number; step: number },
  clip: number,
  weightDecay: number,
): void {
  const bc1 = 1 - h.beta1 ** h.step;
  const bc2 = 1 - h.beta2 ** h.step;
  for (let i = 0; i < p.length; i++) {
    const gi = g[i] * clip;
    m[i] = h.beta1 * m[i] + (1 - h.beta1) * gi;
    v[i] = h.beta2 * v[i] + (1 - h.beta2) * gi * gi;
    p[i] = p[i] * (1 - h.lr * weightDecay) -
      (h.lr / bc1) * m[i] / (Math.sqrt(v[i]) / Math.sqrt(bc2) + h.eps);
  }
}

/** One SGD step in place on p: p ← p(1 − lr·wd) − lr·clip·g (no momentum; kernels/adamw.ts sgdUpdate). */
export function sgdStepRef(p: Float64Array, g: ArrayLike<number>, lr: number, clip: number, weightDecay: number): void {
  for (let i = 0; i < p.length; i++) p[i] = p[i] * (1 - lr * weightDecay) - lr * clip * g[i];
}
