/**
 * f64 reference of multi-head (causal) self-attention, forward and backward, following
 * llm.c's attention_forward_cpu / attention_backward_cpu (docs/design.md#kernel-references-and-test-cases test
 * standard). Layouts as in src/kernels/attention.ts: qkv (B, T, 3C), y (B, T, C), att (B, nh, T, T).
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

/** Rows [first, first + n) of the sequence; positions are row indices (key ≤ query when causal). */
export interface RefBlock {
  first: number;
  n: number;
}

/**
 * One (query block, key block) pair of ring attention (Liu et al., arXiv 2310.01889): partial
 * O (B, q.n, C) and its log-sum-exp L (B, nh, q.n) of the query rows `q` of qkv (B, T, 3C)
 * against the key/value rows `kv` only; a row that sees no key gets O = 0 and L = −∞.
 */
export function blockAttentionForwardRef(
  qkv: Float64Array,
  d: AttentionRefDims,
  q: RefBlock,
  kv: RefBlock,
): { o: Float64Array; lse: Float64Array } {
  const { b: B, t: T, c: C, nh: NH } = d;
  const causal = d.causal ?? true;
  const hs = C / NH, scale = 1 / Math.sqrt(hs);
  const o = new Float64Array(B * q.n * C), lse = new Float64Array(B * NH * q.n).fill(-Infinity);
  const row = new Float64Array(kv.n);
  for (let b = 0; b < B; b++) {
    for (let h = 0; h < NH; h++) {
      for (let i = 0; i < q.n; i++) {
        const t = q.first + i, qa = (b * T + t) * 3 * C + h * hs;
        let mx = -Infinity;
        for (let j = 0; j < kv.n; j++) {
          const s = kv.first + j;
          if (causal && s > t) {
            row[j] = -Infinity;
            continue;
          }
          const ka = (b * T + s) * 3 * C + C + h * hs;
          let dot = 0;
          for (let x = 0; x < hs; x++) dot += qkv[qa + x] * qkv[ka + x];
          mx = Math.max(mx, row[j] = dot * scale);
        }
        if (mx === -Infinity) continue;
        let sum = 0;
        for (let j = 0; j < kv.n; j++) sum += row[j] = Math.exp(row[j] - mx);
        lse[(b * NH + h) * q.n + i] = mx + Math.log(sum);
        const oa = (b * q.n + i) * C + h * hs;
        for (let j = 0; j < kv.n; j++) {
          const va = (b * T + kv.first + j) * 3 * C + 2 * C + h * hs;
          for (let x = 0; x < hs; x++) o[oa + x] += (row[j] / sum) * qkv[va + x];
        }
      }
    }
  }
  return { o, lse };
}

/**
 * The log-sum-exp merge of partial attentions of the same n query rows over disjoint key sets:
 * L = log Σ_i e^{L_i}, O = Σ_i e^{L_i − L} O_i (Ring Attention; FlashAttention's rescaling).
 * O parts (B, n, C), L parts (B, nh, n).
 */
export function mergeAttentionRef(
  parts: { o: Float64Array; lse: Float64Array }[],
  d: { b: number; c: number; nh: number },
  n: number,
): { o: Float64Array; lse: Float64Array } {
  const { b: B, c: C, nh: NH } = d, hs = C / NH;
  const o = new Float64Array(B * n * C), lse = new Float64Array(B * NH * n);
  for (let b = 0; b < B; b++) {
    for (let h = 0; h < NH; h++) {
      for (let i = 0; i < n; i++) {
        const li = (b * NH + h) * n + i;
        const mx = Math.max(...parts.map((p) => p.lse[li]));
        const L = mx === -Infinity ? -Infinity : mx + Math.log(parts.reduce((s, p) => s + Math.exp(p.lse[li] - mx), 0));
        lse[li] = L;
        if (L === -Infinity) continue;
        for (const p of parts) {
          const w = Math.exp(p.lse[li] - L);
          for (let x = 0; x < hs; x++) o[(b * n + i) * C + h * hs + x] += w * p.o[(b * n + i) * C + h * hs + x];
        }
      }
    }
  }
  return { o, lse };
}

/**
 * Backward of one block pair given dy (B, T, C) of the merged output and the full sequence's
 * lse and D = rowsum(dy ∘ y) (B, nh, T): returns the pair's contribution to ∂L/∂qkv (B, T, 3C)
 * (dQ of rows `q`, dK and dV of rows `kv`); summed over all pairs it is attentionBackwardRef.
 */
export function blockAttentionBackwardRef(
  qkv: Float64Array,
  dy: Float64Array,
  lse: Float64Array,
  dsum: Float64Array,
  d: AttentionRefDims,
  q: RefBlock,
  kv: RefBlock,
): Float64Array {
  const { b: B, t: T, c: C, nh: NH } = d;
  const causal = d.causal ?? true;
  const hs = C / NH, scale = 1 / Math.sqrt(hs);
  const g = new Float64Array(B * T * 3 * C);
  for (let b = 0; b < B; b++) {
    for (let h = 0; h < NH; h++) {
      for (let t = q.first; t < q.first + q.n; t++) {
        const qa = (b * T + t) * 3 * C + h * hs, oa = (b * T + t) * C + h * hs, li = (b * NH + h) * T + t;
        for (let s = kv.first; s < kv.first + kv.n; s++) {
          if (causal && s > t) continue;
          const ka = (b * T + s) * 3 * C + C + h * hs, va = ka + C;
          let sc = 0, dp = 0;
          for (let x = 0; x < hs; x++) {
            sc += qkv[qa + x] * qkv[ka + x];
            dp += dy[oa + x] * qkv[va + x];
          }
          const p = Math.exp(sc * scale - lse[li]);
          const ds = p * (dp - dsum[li]) * scale;
          for (let x = 0; x < hs; x++) {
            g[qa + x] += ds * qkv[ka + x];
            g[ka + x] += ds * qkv[qa + x];
            g[va + x] += p * dy[oa + x];
          }
        }
      }
    }
  }
  return g;
}
