/**
 * f64 references of top-k selection and top-k attention (kernels/select_k.ts,
 * kernels/attention.ts with `topk`; docs/design.md#top-k-attention-at-inference): a stable sort of each row by value,
 * largest first, picks the k entries; attention then takes its softmax over them alone.
 */
import { type AttentionRefDims } from './attention.ts';

/**
 * Which live entries of each row of x (rows, n) are among its k largest, by a stable sort
 * (ties go to the lower index); a row with k or fewer live entries keeps them all. Causal: row r
 * has live entries 0 … r mod n. Returns 1 for kept, 0 for dropped, 2 for not live.
 */
export function topkKeepRef(x: ArrayLike<number>, rows: number, n: number, k: number, causal = false): Uint8Array {
  const keep = new Uint8Array(rows * n).fill(2);
  for (let r = 0; r < rows; r++) {
    const len = causal ? (r % n) + 1 : n;
    const order = Array.from({ length: len }, (_, i) => i).sort((a, b) => x[r * n + b] - x[r * n + a] || a - b);
    for (const [rank, i] of order.entries()) keep[r * n + i] = rank < k ? 1 : 0;
  }
  return keep;
}

/**
 * Top-k attention forward: y (B, T, C) from qkv (B, T, 3C) (layout of reference/attention.ts),
 * each query's softmax taken over its k largest scaled scores (all of them when it sees k or
 * fewer keys). Scale 1/sqrt(hs).
 */
export function topkAttentionRef(qkv: Float64Array, d: AttentionRefDims, k: number): Float64Array {
  const { b: B, t: T, c: C, nh: NH } = d;
  const causal = d.causal ?? true;
  const hs = C / NH;
  const scale = 1 / Math.sqrt(hs);
  const y = new Float64Array(B * T * C);
  for (let b = 0; b < B; b++) {
    for (let h = 0; h < NH; h++) {
      for (let t = 0; t < T; t++) {
        const len = causal ? t + 1 : T;
        const s = new Float64Array(len);
        const q = (b * T + t) * 3 * C + h * hs;
        for (let j = 0; j < len; j++) {
          const kk = (b * T + j) * 3 * C + C + h * hs;
          for (let i = 0; i < hs; i++) s[j] += qkv[q + i] * qkv[kk + i];
          s[j] *= scale;
        }
        const keep = topkKeepRef(s, 1, len, k);
        let mx = -Infinity;
        for (let j = 0; j < len; j++) if (keep[j] === 1) mx = Math.max(mx, s[j]);
        let sum = 0;
        const p = s.map((v, j) => (keep[j] === 1 ? Math.exp(v - mx) : 0));
        for (const v of p) sum += v;
        const o = (b * T + t) * C + h * hs;
        for (let j = 0; j < len; j++) {
          const v = (b * T + j) * 3 * C + 2 * C + h * hs;
          for (let i = 0; i < hs; i++) y[o + i] += (p[j] / sum) * qkv[v + i];
        }
      }
    }
  }
  return y;
}
