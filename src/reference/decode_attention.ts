/**
 * f64 reference of decoding attention over a KV cache (src/kernels/decode_attention.ts,
 * docs/design.md#decoding-with-a-kv-cache): one query row per (b, head) over the cached keys 0 … len−1, with the
 * stable softmax. Written from the definition softmax(q·kᵀ/√hs)·V, independently of
 * attention.ts's reference, so the two can check each other through the model test.
 */

/** Shape of one decoding call: batch, width C = nh·hs, heads, cache rows Tmax, keys attended len. */
export interface DecodeRefDims {
  b: number;
  c: number;
  nh: number;
  tMax: number;
  len: number;
}

/**
 * The caches (B, nh, Tmax, hs) that appending `t` tokens of qkv (B, t, 3C) at position `pos` to
 * the caches `k`, `v` gives (returned as new arrays; the inputs are not modified).
 */
export function kvAppendRef(
  qkv: ArrayLike<number>,
  k: ArrayLike<number>,
  v: ArrayLike<number>,
  d: { b: number; c: number; nh: number; tMax: number },
  t: number,
  pos: number,
): { k: Float64Array; v: Float64Array } {
  const { b: B, c: C, nh: NH, tMax } = d;
  const hs = C / NH;
  const ko = Float64Array.from(k), vo = Float64Array.from(v);
  for (let b = 0; b < B; b++) {
    for (let i = 0; i < t; i++) {
      for (let ch = 0; ch < C; ch++) {
        const h = Math.floor(ch / hs), dd = ch % hs;
        const dst = ((b * NH + h) * tMax + pos + i) * hs + dd;
        const src = (b * t + i) * 3 * C + ch;
        ko[dst] = qkv[src + C];
        vo[dst] = qkv[src + 2 * C];
      }
    }
  }
  return { k: ko, v: vo };
}

/**
 * y (B, C): for each (b, h), softmax over s < len of q·k[b, h, s]/√hs, times v[b, h, s].
 * @param qkv (B, 1, 3C): only the q third is read
 * @param k (B, nh, Tmax, hs), @param v the same shape
 */
export function decodeAttentionRef(
  qkv: ArrayLike<number>,
  k: ArrayLike<number>,
  v: ArrayLike<number>,
  d: DecodeRefDims,
): Float64Array {
  const { b: B, c: C, nh: NH, tMax, len } = d;
  const hs = C / NH;
  const scale = 1 / Math.sqrt(hs);
  const y = new Float64Array(B * C);
  const s = new Float64Array(len);
  for (let b = 0; b < B; b++) {
    for (let h = 0; h < NH; h++) {
      const base = (b * NH + h) * tMax * hs;
      let mx = -Infinity;
      for (let j = 0; j < len; j++) {
        let dot = 0;
        for (let i = 0; i < hs; i++) dot += qkv[b * 3 * C + h * hs + i] * k[base + j * hs + i];
        s[j] = dot * scale;
        mx = Math.max(mx, s[j]);
      }
      let sum = 0;
      for (let j = 0; j < len; j++) sum += s[j] = Math.exp(s[j] - mx);
      for (let j = 0; j < len; j++) {
        const w = s[j] / sum;
        for (let i = 0; i < hs; i++) y[b * C + h * hs + i] += w * v[base + j * hs + i];
      }
    }
  }
  return y;
}

/**
 * f64 reference of the partial decode (src/kernels/decode_attention.ts `decodeAttentionPartial`,
 * docs/design.md#tree-attention-decoding): per (b, h) over s < len the row [m, ℓ, o_0 … o_{hs−1}] of (B, nh, hs + 2),
 * m = max s_j, ℓ = Σ exp(s_j − m), o = Σ exp(s_j − m)·v_j with s_j = q·k_j/√hs. len = 0 gives the
 * merge's identity (m = −∞, ℓ = 0, o = 0).
 * @param qkv (B, 1, 3C): only the q third is read; @param k (B, nh, Tmax, hs), @param v the same
 */
export function decodePartialRef(
  qkv: ArrayLike<number>,
  k: ArrayLike<number>,
  v: ArrayLike<number>,
  d: DecodeRefDims,
): Float64Array {
  const { b: B, c: C, nh: NH, tMax, len } = d;
  const hs = C / NH, w = hs + 2;
  const scale = 1 / Math.sqrt(hs);
  const out = new Float64Array(B * NH * w);
  const s = new Float64Array(len);
  for (let b = 0; b < B; b++) {
    for (let h = 0; h < NH; h++) {
      const base = (b * NH + h) * tMax * hs, row = (b * NH + h) * w;
      let mx = -Infinity, sum = 0;
      for (let j = 0; j < len; j++) {
        let dot = 0;
        for (let i = 0; i < hs; i++) dot += qkv[b * 3 * C + h * hs + i] * k[base + j * hs + i];
        mx = Math.max(mx, s[j] = dot * scale);
      }
      for (let j = 0; j < len; j++) {
        const e = Math.exp(s[j] - mx);
        sum += e;
        for (let i = 0; i < hs; i++) out[row + 2 + i] += e * v[base + j * hs + i];
      }
      out[row] = mx;
      out[row + 1] = sum;
    }
  }
  return out;
}

/**
 * y (B, C) from the partials (each (B, nh, hs + 2), see {@link decodePartialRef}) of disjoint
 * shards of one cache: M = max m_i, y = Σ e^{m_i − M}·o_i / Σ e^{m_i − M}·ℓ_i per (b, h).
 * @throws Error when no partial has a key for some (b, h) (every ℓ is 0).
 */
export function mergePartialsRef(parts: ArrayLike<number>[], b: number, nh: number, hs: number): Float64Array {
  const w = hs + 2, y = new Float64Array(b * nh * hs);
  for (let r = 0; r < b * nh; r++) {
    const mx = Math.max(...parts.map((p) => p[r * w]));
    if (mx === -Infinity) throw new Error(`mergePartialsRef: row ${r} has no key in any partial`);
    let den = 0;
    for (const p of parts) {
      const f = Math.exp(p[r * w] - mx);
      den += f * p[r * w + 1];
      for (let i = 0; i < hs; i++) y[r * hs + i] += f * p[r * w + 2 + i];
    }
    for (let i = 0; i < hs; i++) y[r * hs + i] /= den;
  }
  return y;
}
