/**
 * f64 references for kernels/activations.ts (docs/design.md#kernel-references-and-test-cases test standard). Backward
 * functions return fresh gradient arrays of Σ y∘dy (not accumulated).
 */

/** σ(x), overflow-free for any x. */
export function sigmoid(x: number): number {
  const e = Math.exp(-Math.abs(x));
  return x >= 0 ? 1 / (1 + e) : e / (1 + e);
}

/** softplus(x) = log(1 + eˣ), overflow-free. */
export function softplus(x: number): number {
  return Math.max(x, 0) + Math.log1p(Math.exp(-Math.abs(x)));
}

/** silu(x) = x·σ(x), elementwise. */
export function siluRef(x: Float64Array): Float64Array {
  return x.map((v) => v * sigmoid(v));
}

/** dx = dy ∘ σ(x)(1 + x(1 − σ(x))). */
export function siluBackwardRef(x: Float64Array, dy: Float64Array): Float64Array {
  return x.map((v, i) => {
    const s = sigmoid(v);
    return dy[i] * s * (1 + v * (1 - s));
  });
}

/** σ(x), elementwise. */
export function sigmoidRef(x: Float64Array): Float64Array {
  return x.map(sigmoid);
}

/** dx = dy ∘ σ(x)(1 − σ(x)). */
export function sigmoidBackwardRef(x: Float64Array, dy: Float64Array): Float64Array {
  return x.map((v, i) => dy[i] * sigmoid(v) * (1 - sigmoid(v)));
}

/** relu(x)², elementwise. */
export function reluSquaredRef(x: Float64Array): Float64Array {
  return x.map((v) => Math.max(v, 0) ** 2);
}

/** dx = dy ∘ 2·relu(x). */
export function reluSquaredBackwardRef(x: Float64Array, dy: Float64Array): Float64Array {
  return x.map((v, i) => dy[i] * 2 * Math.max(v, 0));
}

/** scale·logσ(x) = −scale·softplus(−x), elementwise. */
export function logSigmoidRef(x: Float64Array, scale = 1): Float64Array {
  return x.map((v) => -scale * softplus(-v));
}

/** dx = dy ∘ scale·σ(−x). */
export function logSigmoidBackwardRef(x: Float64Array, dy: Float64Array, scale = 1): Float64Array {
  return x.map((v, i) => dy[i] * scale * sigmoid(-v));
}

/** softplus(x), elementwise. */
export function softplusRef(x: Float64Array): Float64Array {
  return x.map(softplus);
}

/** dx = dy ∘ σ(x). */
export function softplusBackwardRef(x: Float64Array, dy: Float64Array): Float64Array {
  return x.map((v, i) => dy[i] * sigmoid(v));
}

/** a ∘ b (same size). */
export function mulRef(a: Float64Array, b: Float64Array): Float64Array {
  return a.map((v, i) => v * b[i]);
}

/** da = dy ∘ b, db = dy ∘ a. */
export function mulBackwardRef(
  a: Float64Array,
  b: Float64Array,
  dy: Float64Array,
): { da: Float64Array; db: Float64Array } {
  return { da: mulRef(dy, b), db: mulRef(dy, a) };
}

/** y (B, T, C): y[b, t] = x[b, t − 1], zero at t = 0. */
export function tokenShiftRef(x: Float64Array, b: number, t: number, c: number): Float64Array {
  const y = new Float64Array(b * t * c);
  for (let s = 0; s < b; s++) {
    for (let p = 1; p < t; p++) {
      for (let i = 0; i < c; i++) y[(s * t + p) * c + i] = x[(s * t + p - 1) * c + i];
    }
  }
  return y;
}

/**
 * The decoding form (docs/design.md#decoding-state-of-the-recurrent-layers): y (B, T, C) with y[b, 0] = carry[b] (B, C)
 * instead of zero, and the next carry, x[b, T − 1].
 */
export function tokenShiftCarryRef(
  x: Float64Array,
  carry: Float64Array,
  b: number,
  t: number,
  c: number,
): { y: Float64Array; carry: Float64Array } {
  const y = tokenShiftRef(x, b, t, c), next = new Float64Array(b * c);
  for (let s = 0; s < b; s++) {
    y.set(carry.subarray(s * c, (s + 1) * c), s * t * c);
    next.set(x.subarray((s * t + t - 1) * c, (s * t + t) * c), s * c);
  }
  return { y, carry: next };
}

/** dx (B, T, C): dx[b, t] = dy[b, t + 1], zero at t = T − 1. */
export function tokenShiftBackwardRef(dy: Float64Array, b: number, t: number, c: number): Float64Array {
  const dx = new Float64Array(b * t * c);
  for (let s = 0; s < b; s++) {
    for (let p = 0; p + 1 < t; p++) {
      for (let i = 0; i < c; i++) dx[(s * t + p) * c + i] = dy[(s * t + p + 1) * c + i];
    }
  }
  return dx;
}

/** y (N, C) = a + μ∘(b − a), μ (C) broadcast over rows. */
export function lerpRef(a: Float64Array, b: Float64Array, mu: Float64Array): Float64Array {
  const c = mu.length;
  return a.map((v, i) => v + mu[i % c] * (b[i] - v));
}

/** da = dy∘(1 − μ), db = dy∘μ, dμ (C) = Σ_rows dy∘(b − a). */
export function lerpBackwardRef(
  a: Float64Array,
  b: Float64Array,
  mu: Float64Array,
  dy: Float64Array,
): { da: Float64Array; db: Float64Array; dmu: Float64Array } {
  const c = mu.length;
  const dmu = new Float64Array(c);
  for (let i = 0; i < dy.length; i++) dmu[i % c] += dy[i] * (b[i] - a[i]);
  return { da: dy.map((g, i) => g * (1 - mu[i % c])), db: dy.map((g, i) => g * mu[i % c]), dmu };
}

/** y (N, C) = x ∘ s, s (C) broadcast over rows. */
export function scaleChannelsRef(x: Float64Array, s: Float64Array): Float64Array {
  const c = s.length;
  return x.map((v, i) => v * s[i % c]);
}

/** dx = dy∘s, ds (C) = Σ_rows dy∘x. */
export function scaleChannelsBackwardRef(
  x: Float64Array,
  s: Float64Array,
  dy: Float64Array,
): { dx: Float64Array; ds: Float64Array } {
  const c = s.length;
  const ds = new Float64Array(c);
  for (let i = 0; i < dy.length; i++) ds[i % c] += dy[i] * x[i];
  return { dx: dy.map((g, i) => g * s[i % c]), ds };
}
