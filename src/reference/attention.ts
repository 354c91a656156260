/**
 * f64 reference of multi-head (causal) self-attention, forward and backward, following
 * llm.c's attention_forward_cpu / attention_backward_cpu (DESIGN.md §5 test standard).
 * Layouts as in src/kernels/attention.ts: qkv (B, T, 3C), y (B, T, C), att (B, nh, T, T).
 */

/** Dims of one attention call (see src/kernels/attention.ts). */
export interface AttentionRefDims {
  b: number;
  t: number;
  c: number;
  nh: number;
  causal?: boolean;
}

/**
 * Forward: returns y (B, T, C), the probabilities att (B, nh, T, T) with masked entries 0, and
 * lse (B, nh, T), the log-sum-exp of each scaled, masked score row (what FlashAttention saves).
 */
export function attentionForwardRef(
  qkv: Float64Array,
  d: AttentionRefDims,
): { y: Float64Array; att: Float64Array; lse: Float64Array } {
  const { b: B, t: T, c: C, nh: NH } = d;
  const causal = d.causal ?? true;
  const hs = C / NH;
  const scale = 1 / Math.sqrt(hs);
  const y = new Float64Array(B * T * C);
  const att = new Float64Array(B * NH * T * T);
  const lse = new Float64Array(B * NH * T);
  const row = new Float64Array(T);
  for (let b = 0; b < B; b++) {
    for (let h = 0; h < NH; h++) {
      for (let t = 0; t < T; t++) {
        const q = (b * T + t) * 3 * C + h * hs;
        const len = causal ? t + 1 : T;
        let mx = -Infinity;
        for (let s = 0; s < len; s++) {
          const k = (b * T + s) * 3 * C + C + h * hs;
          let dot = 0;
          for (let i = 0; i < hs; i++) dot += qkv[q + i] * qkv[k + i];
          row[s] = dot * scale;
          mx = Math.max(mx, row[s]);
        }
        let sum = 0;
        for (let s = 0; s < len; s++) sum += row[s] = Math.exp(row[s] - mx);
        lse[(b * NH + h) * T + t] = mx + Math.log(sum);
        const a = ((b * NH + h) * T + t) * T;
        for (let s = 0; s < len; s++) att[a + s] = row[s] / sum;
        const o = (b * T + t) * C + h * hs;
        for (let s = 0; s < len; s++) {
          const v = (b * T + s) * 3 * C + 2 * C + h * hs;
          for (let i = 0; i < hs; i++) y[o + i] += att[a + s] * qkv[v + i];
        }
      }
    }
  }
  return { y, att, lse };
}

/**
 * Backward: ∂L/∂qkv (B, T, 3C) from dy = ∂L/∂y and the forward's att.
 * dP = dY Vᵀ; dS = P ∘ (dP − Σ_s P dP); dQ = scale·dS K; dK = scale·dSᵀ Q; dV = Pᵀ dY.
 */
export function attentionBackwardRef(
  qkv: Float64Array,
  att: Float64Array,
  dy: Float64Array,
  d: AttentionRefDims,
): Float64Array {
  const { b: B, t: T, c: C, nh: NH } = d;
  const causal = d.causal ?? true;
  const hs = C / NH;
  const scale = 1 / Math.sqrt(hs);
  const dqkv = new Float64Array(B * T * 3 * C);
  const dp = new Float64Array(T);
  for (let b = 0; b < B; b++) {
    for (let h = 0; h < NH; h++) {
      for (let t = 0; t < T; t++) {
        const len = causal ? t + 1 : T;
        const a = ((b * NH + h) * T + t) * T;
        const o = (b * T + t) * C + h * hs;
        let pdp = 0;
        for (let s = 0; s < len; s++) {
          const v = (b * T + s) * 3 * C + 2 * C + h * hs;
          let dot = 0;
          for (let i = 0; i < hs; i++) {
            dot += dy[o + i] * qkv[v + i];
            dqkv[v + i] += att[a + s] * dy[o + i];
          }
          dp[s] = dot;
          pdp += att[a + s] * dot;
        }
        const q = (b * T + t) * 3 * C + h * hs;
        for (let s = 0; s < len; s++) {
          const ds = att[a + s] * (dp[s] - pdp) * scale;
          const k = (b * T + s) * 3 * C + C + h * hs;
          for (let i = 0; i < hs; i++) {
            dqkv[q + i] += ds * qkv[k + i];
            dqkv[k + i] += ds * qkv[q + i];
          }
        }
      }
    }
  }
  return dqkv;
}
