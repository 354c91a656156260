/** f64 references for the elementwise kernels (docs/design.md#kernel-references-and-test-cases test standard). */

const K = Math.sqrt(2 / Math.PI);
const C = 0.044715;

/** GELU, tanh approximation (arXiv 1606.08415), elementwise. */
export function geluRef(x: Float64Array): Float64Array {
  return x.map((v) => 0.5 * v * (1 + Math.tanh(K * (v + C * v * v * v))));
}

/** dx = dy ∘ GELU′(x). */
export function geluBackwardRef(x: Float64Array, dy: Float64Array): Float64Array {
  return x.map((v, i) => {
    const t = Math.tanh(K * (v + C * v * v * v));
    const du = K * (1 + 3 * C * v * v);
    return dy[i] * (0.5 * (1 + t) + 0.5 * v * (1 - t * t) * du);
  });
}

/** out = x + bias broadcast over rows, x (N, C), bias (C). */
export function addBiasRef(x: Float64Array, bias: Float64Array): Float64Array {
  return x.map((v, i) => v + bias[i % bias.length]);
}
