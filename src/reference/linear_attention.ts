/**
 * f64 sequential references for linear attention with decay (test-only oracles, docs/design.md#kernels).
 *
 * Recurrent per-channel decay with bonus u (GLA / RWKV-6, BlinkDL/RWKV-LM `wkv6_cuda.cu`), per
 * (batch b, head h), state S (K×V), S_{−1} = 0:
 *   P_t = diag(e^{w_t}) S_{t−1};  S_t = P_t + k_tᵀ v_t;  o_t = scale · q_t (P_t + diag(u) k_tᵀ v_t).
 * The scalar-decay form ("simple GLA", fla-org/flash-linear-attention `fla/ops/simple_gla`) is
 * the special case w_t = g_t broadcast over K and u = 1: o_t = scale · q_t S_t.
 *
 * Layouts: q, k, w (B, T, H·K); v, o (B, T, H·V); g (B, T, H); u (H·K); chunk states
 * (B, H, N, K, V) with N = ⌈T/L⌉, slot n = the state entering chunk n (S after position nL − 1).
 */
import type { LinearAttentionDims } from '../kernels/linear_attention.ts';

/** Gradients of the recurrent form; du is null when u was. */
export interface RecurrentGrads {
  dq: Float64Array;
  dk: Float64Array;
  dv: Float64Array;
  dw: Float64Array;
  du: Float64Array | null;
}

/** Calls fn(b, h, qk(t, i), vv(t, j)) with index helpers for every (b, h). */
function eachHead(
  d: LinearAttentionDims,
  fn: (
    b: number,
    h: number,
    qk: (t: number, i: number) => number,
    vv: (t: number, j: number) => number,
  ) => void,
): void {
  const { b: nb, t: nt, h: nh, dk, dv } = d;
  for (let b = 0; b < nb; b++) {
    for (let h = 0; h < nh; h++) {
      fn(
        b,
        h,
        (t, i) => ((b * nt + t) * nh + h) * dk + i,
        (t, j) => ((b * nt + t) * nh + h) * dv + j,
      );
    }
  }
}

/**
 * Recurrent forward: o (B, T, H·V). When `chunk` is given, also returns the states entering
 * every chunk of that length, (B, H, ⌈T/chunk⌉, K, V).
 */
export function recurrentForwardRef(
  q: ArrayLike<number>,
  k: ArrayLike<number>,
  v: ArrayLike<number>,
  w: ArrayLike<number>,
  u: ArrayLike<number> | null,
  d: LinearAttentionDims,
  chunk = 0,
): { o: Float64Array; states: Float64Array } {
  const { o, states } = forward(q, k, v, w, u, d, chunk, null);
  return { o, states };
}

/**
 * The decoding form (docs/design.md#decoding-state-of-the-recurrent-layers; ChatRWKV's per-layer wkv state, fla-org
 * fused_recurrent's initial_state / output_final_state): o (B, T, H·V) of the recurrence from S₀ (B, H, K, V) instead
 * of zero, and S (B, H, K, V) after its last step. The scalar-decay form passes {@link broadcastDecay}(g) for w and
 * null for u.
 */
export function recurrentStateUpdateRef(
  q: ArrayLike<number>,
  k: ArrayLike<number>,
  v: ArrayLike<number>,
  w: ArrayLike<number>,
  u: ArrayLike<number> | null,
  d: LinearAttentionDims,
  s0: ArrayLike<number>,
): { o: Float64Array; state: Float64Array } {
  const { o, last } = forward(q, k, v, w, u, d, 0, s0);
  return { o, state: last };
}

/** The recurrence from s0 (zero when null): o, the chunk-entry states, and the last state (B, H, K, V). */
function forward(
  q: ArrayLike<number>,
  k: ArrayLike<number>,
  v: ArrayLike<number>,
  w: ArrayLike<number>,
  u: ArrayLike<number> | null,
  d: LinearAttentionDims,
  chunk: number,
  s0: ArrayLike<number> | null,
): { o: Float64Array; states: Float64Array; last: Float64Array } {
  const { t: nt, h: nh, dk, dv, scale } = d;
  const nc = chunk ? Math.ceil(nt / chunk) : 0;
  const o = new Float64Array(d.b * nt * nh * dv);
  const states = new Float64Array(d.b * nh * nc * dk * dv);
  const last = new Float64Array(d.b * nh * dk * dv);
  eachHead(d, (b, h, qk, vv) => {
    const at = (b * nh + h) * dk * dv;
    const s = s0 ? Float64Array.from({ length: dk * dv }, (_, x) => s0[at + x]) : new Float64Array(dk * dv);
    for (let t = 0; t < nt; t++) {
      if (chunk && t % chunk === 0) states.set(s, ((b * nh + h) * nc + t / chunk) * dk * dv);
      for (let i = 0; i < dk; i++) {
        const e = Math.exp(w[qk(t, i)]);
        const ui = u ? u[h * dk + i] : 1;
        const qi = q[qk(t, i)];
        const ki = k[qk(t, i)];
        for (let j = 0; j < dv; j++) {
          const p = e * s[i * dv + j];
          const kv = ki * v[vv(t, j)];
          o[vv(t, j)] += scale * qi * (p + ui * kv);
          s[i * dv + j] = p + kv;
        }
      }
    }
    last.set(s, at);
  });
  return { o, states, last };
}

/**
 * Hand-written backward of {@link recurrentForwardRef} for dout = ∂L/∂o: replays the forward
 * keeping every S_t, then runs D_t = ∂L/∂S_t backwards: with H_t = D_t + scale·q_tᵀ dout_t,
 * D_{t−1} = diag(e^{w_t}) H_t and ∂L/∂w_t[i] = Σ_j H_t[i,j] P_t[i,j] (the direct form, not the
 * cumsum identity the GPU kernels use, so the two check each other).
 */
export function recurrentBackwardRef(
  q: ArrayLike<number>,
  k: ArrayLike<number>,
  v: ArrayLike<number>,
  w: ArrayLike<number>,
  u: ArrayLike<number> | null,
  dout: ArrayLike<number>,
  d: LinearAttentionDims,
): RecurrentGrads {
  const { t: nt, h: nh, dk, dv, scale } = d;
  const nq = d.b * nt * nh * dk;
  const g: RecurrentGrads = {
    dq: new Float64Array(nq),
    dk: new Float64Array(nq),
    dv: new Float64Array(d.b * nt * nh * dv),
    dw: new Float64Array(nq),
    du: u ? new Float64Array(nh * dk) : null,
  };
  eachHead(d, (_b, h, qk, vv) => {
    // prev[t] = S_{t−1}, flattened (K, V).
    const prev: Float64Array[] = [];
    let s = new Float64Array(dk * dv);
    for (let t = 0; t < nt; t++) {
      prev.push(s);
      const next = new Float64Array(dk * dv);
      for (let i = 0; i < dk; i++) {
        const e = Math.exp(w[qk(t, i)]);
        for (let j = 0; j < dv; j++) {
          next[i * dv + j] = e * s[i * dv + j] + k[qk(t, i)] * v[vv(t, j)];
        }
      }
      s = next;
    }
    let dS = new Float64Array(dk * dv);
    for (let t = nt - 1; t >= 0; t--) {
      let vdo = 0;
      for (let j = 0; j < dv; j++) vdo += v[vv(t, j)] * dout[vv(t, j)];
      let quk = 0;
      for (let i = 0; i < dk; i++) quk += q[qk(t, i)] * (u ? u[h * dk + i] : 1) * k[qk(t, i)];
      const nextD = new Float64Array(dk * dv);
      for (let i = 0; i < dk; i++) {
        const e = Math.exp(w[qk(t, i)]);
        const ui = u ? u[h * dk + i] : 1;
        const qi = q[qk(t, i)];
        const ki = k[qk(t, i)];
        let dqi = 0;
        let dki = 0;
        let dwi = 0;
        for (let j = 0; j < dv; j++) {
          const p = e * prev[t][i * dv + j];
          const dj = dout[vv(t, j)];
          const vj = v[vv(t, j)];
          dqi += dj * (p + ui * ki * vj);
          dki += dS[i * dv + j] * vj;
          g.dv[vv(t, j)] += ki * dS[i * dv + j];
          const hij = dS[i * dv + j] + scale * qi * dj;
          dwi += hij * p;
          nextD[i * dv + j] = e * hij;
        }
        g.dq[qk(t, i)] += scale * dqi;
        g.dk[qk(t, i)] += dki + scale * qi * ui * vdo;
        g.dw[qk(t, i)] += dwi;
        if (g.du) g.du[h * dk + i] += scale * qi * ki * vdo;
      }
      for (let j = 0; j < dv; j++) g.dv[vv(t, j)] += scale * dout[vv(t, j)] * quk;
      dS = nextD;
    }
  });
  return g;
}

/** g (B, T, H) broadcast over K to a w of (B, T, H·K). */
export function broadcastDecay(g: ArrayLike<number>, d: LinearAttentionDims): Float64Array {
  const w = new Float64Array(d.b * d.t * d.h * d.dk);
  for (let r = 0; r < d.b * d.t * d.h; r++) w.fill(g[r], r * d.dk, (r + 1) * d.dk);
  return w;
}

/**
 * Scalar-decay ("simple GLA") forward: o (B, T, H·V) and the states entering each chunk of
 * length `chunk`, (B, H, ⌈T/chunk⌉, K, V); g (B, T, H).
 */
export function simpleGlaForwardRef(
  q: ArrayLike<number>,
  k: ArrayLike<number>,
  v: ArrayLike<number>,
  g: ArrayLike<number>,
  d: LinearAttentionDims,
  chunk: number,
): { o: Float64Array; states: Float64Array } {
  return recurrentForwardRef(q, k, v, broadcastDecay(g, d), null, d, chunk);
}

/** Scalar-decay backward: dq, dk, dv and dg (B, T, H) = Σ_i ∂L/∂w[…, i] (chain rule of the broadcast). */
export function simpleGlaBackwardRef(
  q: ArrayLike<number>,
  k: ArrayLike<number>,
  v: ArrayLike<number>,
  g: ArrayLike<number>,
  dout: ArrayLike<number>,
  d: LinearAttentionDims,
): { dq: Float64Array; dk: Float64Array; dv: Float64Array; dg: Float64Array } {
  const r = recurrentBackwardRef(q, k, v, broadcastDecay(g, d), null, dout, d);
  const dg = new Float64Array(d.b * d.t * d.h);
  for (let i = 0; i < r.dw.length; i++) dg[Math.floor(i / d.dk)] += r.dw[i];
  return { dq: r.dq, dk: r.dk, dv: r.dv, dg };
}
