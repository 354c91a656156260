/** Slicing (B, T, W) arrays along T, for the decoding tests that run a sequence in pieces. */

/** Steps t0 … t1−1 of a (B, T, W) array. */
export function stepsOf(a: Float64Array, b: number, t: number, w: number, t0: number, t1: number): Float64Array {
  const out = new Float64Array(b * (t1 - t0) * w);
  for (let r = 0; r < b; r++) out.set(a.subarray((r * t + t0) * w, (r * t + t1) * w), r * (t1 - t0) * w);
  return out;
}

/** Appends (B, t, W) pieces along T. */
export function concatSteps(parts: Float64Array[], b: number, w: number): Float64Array {
  const t = parts.reduce((n, p) => n + p.length / (b * w), 0), out = new Float64Array(b * t * w);
  let t0 = 0;
  for (const p of parts) {
    const tp = p.length / (b * w);
    for (let r = 0; r < b; r++) out.set(p.subarray(r * tp * w, (r + 1) * tp * w), (r * t + t0) * w);
    t0 += tp;
  }
  return out;
}
