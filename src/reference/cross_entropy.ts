/**
 * f64 softmax cross-entropy reference with an ignore mask (targets < 0 ignored), for the
 * kernel tests (docs/design.md#kernel-references-and-test-cases). Loss in nats, averaged over the non-ignored rows.
 */

/** lse (N) per row, the mean loss over rows with target ≥ 0, and their count (loss 0 when none). */
export function crossEntropyRef(
  logits: Float64Array,
  targets: Int32Array,
  n: number,
  v: number,
): { lse: Float64Array; loss: number; count: number } {
  const lse = new Float64Array(n);
  let sum = 0;
  let count = 0;
  for (let r = 0; r < n; r++) {
    const o = r * v;
    let m = -Infinity;
    for (let i = 0; i < v; i++) m = Math.max(m, logits[o + i]);
    let s = 0;
    for (let i = 0; i < v; i++) s += Math.exp(logits[o + i] - m);
    lse[r] = m + Math.log(s);
    if (targets[r] >= 0) {
      sum += lse[r] - logits[o + targets[r]];
      count++;
    }
  }
  return { lse, loss: count > 0 ? sum / count : 0, count };
}

/** d(gradScale · loss)/d logits: (softmax − onehot)·gradScale/count on non-ignored rows, 0 elsewhere. */
export function crossEntropyBackwardRef(
  logits: Float64Array,
  targets: Int32Array,
  n: number,
  v: number,
  gradScale = 1,
): Float64Array {
  const { lse, count } = crossEntropyRef(logits, targets, n, v);
  const d = new Float64Array(n * v);
  if (count === 0) return d;
  for (let r = 0; r < n; r++) {
    if (targets[r] < 0) continue;
    for (let i = 0; i < v; i++) {
      d[r * v + i] = (Math.exp(logits[r * v + i] - lse[r]) - (i === targets[r] ? 1 : 0)) *
        gradScale / count;
    }
  }
  return d;
}
