/**
 * f64 CPU references of the mixture-of-experts kernels (src/kernels/moe.ts) and of a whole MoE
 * MLP: router softmax, top-k, combine weights, capacity-limited slots in token order (Switch
 * Transformer arXiv 2101.03961 §2.2, GShard arXiv 2006.16668 Algorithm 1 with local groups),
 * the row gathers and the load-balancing loss. Test-only.
 */
import type { SlotPlan } from '../kernels/moe.ts';

/** y (N, E) = row-wise softmax of x (N, E). */
export function softmaxRowsRef(x: ArrayLike<number>, n: number, e: number): Float64Array {
  const y = new Float64Array(n * e);
  for (let r = 0; r < n; r++) {
    let m = -Infinity;
    for (let i = 0; i < e; i++) m = Math.max(m, x[r * e + i]);
    let s = 0;
    for (let i = 0; i < e; i++) s += Math.exp(x[r * e + i] - m);
    for (let i = 0; i < e; i++) y[r * e + i] = Math.exp(x[r * e + i] - m) / s;
  }
  return y;
}

/** dx (N, E) = y ∘ (dy − ⟨y, dy⟩_row). */
export function softmaxRowsBackwardRef(
  y: ArrayLike<number>,
  dy: ArrayLike<number>,
  n: number,
  e: number,
): Float64Array {
  const dx = new Float64Array(n * e);
  for (let r = 0; r < n; r++) {
    let d = 0;
    for (let i = 0; i < e; i++) d += y[r * e + i] * dy[r * e + i];
    for (let i = 0; i < e; i++) dx[r * e + i] = y[r * e + i] * (dy[r * e + i] - d);
  }
  return dx;
}

/** top (N, k): the k most probable experts per row, best first, ties to the lower index. */
export function topKRef(probs: ArrayLike<number>, n: number, e: number, k: number): Int32Array {
  const top = new Int32Array(n * k);
  for (let r = 0; r < n; r++) {
    const order = [...Array(e).keys()].sort((a, b) => probs[r * e + b] - probs[r * e + a] || a - b);
    for (let j = 0; j < k; j++) top[r * k + j] = order[j];
  }
  return top;
}

/** gates (N, k) = probs[n, top_j] (/ Σ_j when renormalising). */
export function gatesRef(
  probs: ArrayLike<number>,
  top: Int32Array,
  n: number,
  e: number,
  k: number,
  renorm: boolean,
): Float64Array {
  const g = new Float64Array(n * k);
  for (let r = 0; r < n; r++) {
    let s = 0;
    for (let j = 0; j < k; j++) s += probs[r * e + top[r * k + j]];
    for (let j = 0; j < k; j++) g[r * k + j] = probs[r * e + top[r * k + j]] / (renorm ? s : 1);
  }
  return g;
}

/** dprobs (N, E) of {@link gatesRef} for dgates (N, k). */
export function gatesBackwardRef(
  probs: ArrayLike<number>,
  top: Int32Array,
  dg: ArrayLike<number>,
  n: number,
  e: number,
  k: number,
  renorm: boolean,
): Float64Array {
  const dp = new Float64Array(n * e);
  for (let r = 0; r < n; r++) {
    let s = 0, q = 0;
    for (let j = 0; j < k; j++) {
      const p = probs[r * e + top[r * k + j]];
      s += p;
      q += p * dg[r * k + j];
    }
    for (let j = 0; j < k; j++) dp[r * e + top[r * k + j]] += renorm ? dg[r * k + j] / s - q / (s * s) : dg[r * k + j];
  }
  return dp;
}

/** Slots as the GPU assigns them: slot (N, k), slotSrc (E·rows), load (G·E) of first choices. */
export function assignSlotsRef(
  top: Int32Array,
  plan: SlotPlan,
): { slot: Int32Array; slotSrc: Int32Array; load: Int32Array } {
  const { n, e, k, groups, capacity, rows } = plan;
  const gs = n / groups;
  const slot = new Int32Array(n * k).fill(-1);
  const slotSrc = new Int32Array(e * rows).fill(-1);
  const fill = new Int32Array(groups * e);
  const load = new Int32Array(groups * e);
  for (let j = 0; j < k; j++) {
    for (let t = 0; t < n; t++) {
      const g = Math.floor(t / gs), x = top[t * k + j], ge = g * e + x;
      if (j === 0) load[ge]++;
      if (fill[ge] < capacity) {
        const s = x * rows + g * capacity + fill[ge]++;
        slot[t * k + j] = s;
        slotSrc[s] = t * k + j;
      }
    }
  }
  return { slot, slotSrc, load };
}

/** out (S, C) = w[index[s]] · x[index[s] / div] (0 for index < 0). */
export function gatherRowsRef(
  x: ArrayLike<number>,
  index: Int32Array,
  c: number,
  div = 1,
  w?: ArrayLike<number>,
): Float64Array {
  const out = new Float64Array(index.length * c);
  index.forEach((q, s) => {
    if (q < 0) return;
    const src = Math.floor(q / div);
    for (let i = 0; i < c; i++) out[s * c + i] = (w ? w[q] : 1) * x[src * c + i];
  });
  return out;
}

/** out (N, C) = Σ_j w[n·k+j] · src[index[n·k+j]] (index ≥ 0). */
export function gatherSumRowsRef(
  src: ArrayLike<number>,
  index: Int32Array,
  n: number,
  k: number,
  c: number,
  w?: ArrayLike<number>,
): Float64Array {
  const out = new Float64Array(n * c);
  for (let r = 0; r < n; r++) {
    for (let j = 0; j < k; j++) {
      const s = index[r * k + j];
      if (s < 0) continue;
      for (let i = 0; i < c; i++) out[r * c + i] += (w ? w[r * k + j] : 1) * src[s * c + i];
    }
  }
  return out;
}

/** out (N, k) = ⟨a[n], src[index[n·k+j]]⟩ (0 for index < 0). */
export function rowDotsRef(
  a: ArrayLike<number>,
  src: ArrayLike<number>,
  index: Int32Array,
  n: number,
  k: number,
  c: number,
): Float64Array {
  const out = new Float64Array(n * k);
  for (let q = 0; q < n * k; q++) {
    const s = index[q], r = Math.floor(q / k);
    if (s < 0) continue;
    for (let i = 0; i < c; i++) out[q] += a[r * c + i] * src[s * c + i];
  }
  return out;
}

/** out (N, C) = Σ_{s: index[s] = n} w[s]·src[s], the plain scatter-add. */
export function scatterAddRowsRef(
  src: ArrayLike<number>,
  index: Int32Array,
  n: number,
  c: number,
  w?: ArrayLike<number>,
): Float64Array {
  const out = new Float64Array(n * c);
  index.forEach((t, s) => {
    if (t < 0) return;
    for (let i = 0; i < c; i++) out[t * c + i] += (w ? w[s] : 1) * src[s * c + i];
  });
  return out;
}

/**
 * Load-balancing loss (α/G)·Σ_g E·Σ_e f_ge·P_ge (Switch eq. 4 per group): f = first-choice
 * load / (N/G), P = mean router probability over the group; and its gradient in probs (N, E).
 */
export function auxLossRef(
  probs: ArrayLike<number>,
  load: Int32Array,
  plan: SlotPlan,
  alpha: number,
): { loss: number; grad: Float64Array } {
  const { n, e, groups } = plan;
  const gs = n / groups;
  let loss = 0;
  const grad = new Float64Array(n * e);
  for (let g = 0; g < groups; g++) {
    for (let x = 0; x < e; x++) {
      let P = 0;
      for (let t = g * gs; t < (g + 1) * gs; t++) P += probs[t * e + x] / gs;
      const f = load[g * e + x] / gs;
      loss += (alpha * e * f * P) / groups;
      for (let t = g * gs; t < (g + 1) * gs; t++) grad[t * e + x] = (alpha * e * f) / (gs * groups);
    }
  }
  return { loss, grad };
}

/** One expert: GELU MLP x (C) → 4C → C with weights as torch.nn.Linear (out, in). */
export interface ExpertWeights {
  fc: ArrayLike<number>;
  fcB?: ArrayLike<number>;
  proj: ArrayLike<number>;
  projB?: ArrayLike<number>;
}

const geluRef = (x: number) => 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x ** 3)));

/**
 * A whole MoE MLP on x (N, C): routes with router (E, C), sends each token's kept choices to
 * their experts and sums gate·expert(x). Returns y (N, C) and the slots used.
 */
export function moeMlpRef(
  x: ArrayLike<number>,
  router: ArrayLike<number>,
  experts: ExpertWeights[],
  plan: SlotPlan,
  c: number,
  renorm: boolean,
): { y: Float64Array; slot: Int32Array; probs: Float64Array } {
  const { n, e, k } = plan;
  const logits = new Float64Array(n * e);
  for (let r = 0; r < n; r++) {
    for (let q = 0; q < e; q++) for (let i = 0; i < c; i++) logits[r * e + q] += x[r * c + i] * router[q * c + i];
  }
  const probs = softmaxRowsRef(logits, n, e);
  const top = topKRef(probs, n, e, k);
  const gates = gatesRef(probs, top, n, e, k, renorm);
  const { slot } = assignSlotsRef(top, plan);
  const y = new Float64Array(n * c);
  const h = new Float64Array(4 * c);
  for (let r = 0; r < n; r++) {
    for (let j = 0; j < k; j++) {
      if (slot[r * k + j] < 0) continue;
      const w = experts[top[r * k + j]];
      for (let o = 0; o < 4 * c; o++) {
        let s = w.fcB ? w.fcB[o] : 0;
        for (let i = 0; i < c; i++) s += w.fc[o * c + i] * x[r * c + i];
        h[o] = geluRef(s);
      }
      for (let o = 0; o < c; o++) {
        let s = w.projB ? w.projB[o] : 0;
        for (let i = 0; i < 4 * c; i++) s += w.proj[o * 4 * c + i] * h[i];
        y[r * c + o] += gates[r * k + j] * s;
      }
    }
  }
  return { y, slot, probs };
}
