/** f64 reference of GPT-2's token + position embedding (llm.c encoder_forward/backward), for tests. */

/** out (B, T, C) = wte[tokens] + wpe[t] with wte (V, C), wpe (Tmax, C). */
export function embeddingRef(
  tokens: Int32Array,
  wte: Float64Array,
  wpe: Float64Array,
  b: number,
  t: number,
  c: number,
): Float64Array {
  const out = new Float64Array(b * t * c);
  for (let r = 0; r < b * t; r++) {
    const tok = tokens[r];
    const pos = r % t;
    for (let i = 0; i < c; i++) out[r * c + i] = wte[tok * c + i] + wpe[pos * c + i];
  }
  return out;
}

/** Gradients of Σ out∘dout: dwte (V, C) and dwpe (Tmax, C) (rows ≥ T zero). Fresh arrays. */
export function embeddingBackwardRef(
  tokens: Int32Array,
  dout: Float64Array,
  v: number,
  tmax: number,
  b: number,
  t: number,
  c: number,
): { dwte: Float64Array; dwpe: Float64Array } {
  const dwte = new Float64Array(v * c);
  const dwpe = new Float64Array(tmax * c);
  for (let r = 0; r < b * t; r++) {
    const tok = tokens[r];
    const pos = r % t;
    for (let i = 0; i < c; i++) {
      dwte[tok * c + i] += dout[r * c + i];
      dwpe[pos * c + i] += dout[r * c + i];
    }
  }
  return { dwte, dwpe };
}
