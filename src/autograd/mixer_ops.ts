/**
 * Differentiable sequence mixers other than softmax attention: chunked linear attention,
 * the per-channel-decay recurrence (RWKV-6 / GLA), Mamba's selective scan and its causal
 * depthwise conv1d. Same conventions as ops.ts: shapes checked here with a message, outputs
 * from the tape, one record per call for the rule in mixer_rules.ts.
 */
import {
  LA_CHUNK,
  type LinearAttentionDims,
  linearAttentionForward,
  linearAttentionStateShape,
} from '../kernels/linear_attention.ts';
import { linearAttentionStateUpdate, recurrentLinearAttentionForward } from '../kernels/linear_attention_recurrent.ts';
import {
  type ScanDims,
  scanStateShape,
  selectiveScanForward,
  selectiveStateUpdate,
} from '../kernels/selective_scan.ts';
import { conv1dCarryForward, type Conv1dDims, conv1dForward } from '../kernels/conv1d.ts';
import type { Tensor } from '../gpu/tensor.ts';
import type { Tape } from './tape.ts';
import { expectInference } from './expect.ts';

export type { Conv1dDims, LinearAttentionDims, ScanDims };
export { LA_CHUNK };

function expectSize(label: string, name: string, t: Tensor, size: number, shape: string): void {
  if (t.size !== size) throw new Error(`${label}: ${name} [${t.shape}] is not ${shape}`);
}

/**
 * o (B, T, H·V) = linear attention with a scalar decay per head and step (simple GLA; RetNet
 * and Mamba-2 SSD are special cases): S_t = e^{g_t} S_{t−1} + k_tᵀ v_t, o_t = scale · q_t S_t,
 * computed chunk-wise (fla-org/flash-linear-attention `fla/ops/simple_gla`).
 * @param q, k (B, T, H·K), v (B, T, H·V), g (B, T, H) log-decays ≤ 0.
 * @param state decoding (docs/design.md#decoding-state-of-the-recurrent-layers): the carried S (B, H, K, V), read as
 * S_{−1} and
 *   overwritten with S_{T−1}; the recurrent kernel runs it with g broadcast over K (the chunked
 *   kernel keeps no final state). null: S_{−1} = 0 (training, full forwards).
 * @throws Error naming the input whose size does not match `d`, or for a state on a recording
 *   tape (the carry has no gradient).
 */
export function linearAttention(
  tape: Tape,
  q: Tensor,
  k: Tensor,
  v: Tensor,
  g: Tensor,
  d: LinearAttentionDims,
  label = 'la',
  state: Tensor | null = null,
): Tensor {
  const { b, t, h, dk, dv } = d;
  expectSize(label, 'q', q, b * t * h * dk, `(B=${b}, T=${t}, H·K=${h * dk})`);
  expectSize(label, 'k', k, b * t * h * dk, `(B=${b}, T=${t}, H·K=${h * dk})`);
  expectSize(label, 'v', v, b * t * h * dv, `(B=${b}, T=${t}, H·V=${h * dv})`);
  expectSize(label, 'g', g, b * t * h, `(B=${b}, T=${t}, H=${h})`);
  const o = tape.alloc([b, t, h * dv], label);
  if (state) {
    expectInference(tape, label);
    linearAttentionStateUpdate(tape.gpu, q, k, v, g, null, o, state, d, true);
    return o;
  }
  const states = tape.alloc(linearAttentionStateShape(d), `${label}.states`);
  linearAttentionForward(tape.gpu, q, k, v, g, o, states, d);
  tape.record({ op: 'linearAttention', q, k, v, g, o, states, dims: d }, [q, k, v, g], [o]);
  return o;
}

/**
 * o (B, T, H·V) = the per-channel-decay recurrence with a bonus for the current token
 * (RWKV-6 `wkv6`, GLA): S_t = diag(e^{w_t}) S_{t−1} + k_tᵀ v_t,
 * o_t = scale · q_t (diag(e^{w_t}) S_{t−1} + diag(u) k_tᵀ v_t). u = null means u = 1.
 * @param q, k, w (B, T, H·K), v (B, T, H·V), u (H·K) or null.
 * @param state decoding (docs/design.md#decoding-state-of-the-recurrent-layers): the carried S (B, H, K, V), read as
 * S_{−1} and
 *   overwritten with S_{T−1} (RWKV's wkv state); null: S_{−1} = 0 (training, full forwards).
 * @throws Error naming the input whose size does not match `d`, or for a state on a recording
 *   tape (the carry has no gradient).
 */
export function recurrentLinearAttention(
  tape: Tape,
  q: Tensor,
  k: Tensor,
  v: Tensor,
  w: Tensor,
  u: Tensor | null,
  d: LinearAttentionDims,
  label = 'wkv',
  state: Tensor | null = null,
): Tensor {
  const { b, t, h, dk, dv } = d;
  for (const [name, x] of [['q', q], ['k', k], ['w', w]] as const) {
    expectSize(label, name, x, b * t * h * dk, `(B=${b}, T=${t}, H·K=${h * dk})`);
  }
  expectSize(label, 'v', v, b * t * h * dv, `(B=${b}, T=${t}, H·V=${h * dv})`);
  if (u) expectSize(label, 'u', u, h * dk, `(H·K=${h * dk})`);
  const o = tape.alloc([b, t, h * dv], label);
  if (state) {
    expectInference(tape, label);
    linearAttentionStateUpdate(tape.gpu, q, k, v, w, u, o, state, d);
    return o;
  }
  recurrentLinearAttentionForward(tape.gpu, q, k, v, w, u, o, d);
  tape.record({ op: 'recurrentLinearAttention', q, k, v, w, u, o, dims: d }, [q, k, v, w, u], [o]);
  return o;
}

/**
 * Mamba's selective scan (Gu & Dao, arXiv 2312.00752; state-spaces/mamba `selective_scan_ref`):
 * Δ = softplus(δ + bias), h_t = e^{Δ_t A} h_{t−1} + Δ_t B_t u_t, y_t = C_t·h_t + D u_t,
 * out = y · silu(z) (no gate when z is null).
 * @param u, delta, z (B, T, D); A (D, N) negative; Bm, Cm (B, T, N); D, bias (D).
 * @param ssm decoding (docs/design.md#decoding-state-of-the-recurrent-layers): the carried state (B, D, N), read as h
 * before the
 *   first step and overwritten with h after the last; null: h₀ = 0 (training, full forwards).
 * @returns out (B, T, D); chunk-boundary states are saved for the backward.
 * @throws Error naming the input whose size does not match `s`, or for a carried state on a
 *   recording tape (the carry has no gradient).
 */
export function selectiveScan(
  tape: Tape,
  u: Tensor,
  delta: Tensor,
  A: Tensor,
  Bm: Tensor,
  Cm: Tensor,
  D: Tensor,
  bias: Tensor,
  z: Tensor | null,
  s: ScanDims,
  label = 'scan',
  ssm: Tensor | null = null,
): Tensor {
  const { b, t, d, n } = s;
  for (const [name, x] of [['u', u], ['delta', delta], ['z', z]] as const) {
    if (x) expectSize(label, name, x, b * t * d, `(B=${b}, T=${t}, D=${d})`);
  }
  for (const [name, x] of [['B', Bm], ['C', Cm]] as const) {
    expectSize(label, name, x, b * t * n, `(B=${b}, T=${t}, N=${n})`);
  }
  expectSize(label, 'A', A, d * n, `(D=${d}, N=${n})`);
  expectSize(label, 'D', D, d, `(D=${d})`);
  expectSize(label, 'bias', bias, d, `(D=${d})`);
  const out = tape.alloc([b, t, d], label);
  if (ssm) {
    expectInference(tape, label);
    selectiveStateUpdate(tape.gpu, u, delta, A, Bm, Cm, D, bias, z, out, ssm, s);
    return out;
  }
  const states = tape.alloc(scanStateShape(s), `${label}.states`);
  selectiveScanForward(tape.gpu, u, delta, A, Bm, Cm, D, bias, z, out, states, s);
  tape.record({ op: 'selectiveScan', u, delta, A, Bm, Cm, D, bias, z, out, states, dims: s }, [
    u,
    delta,
    A,
    Bm,
    Cm,
    D,
    bias,
    z,
  ], [out]);
  return out;
}

/**
 * Causal depthwise conv1d (Mamba block): y_t[d] = bias[d] + Σ_j w[d, j] · x_{t−K+1+j}[d].
 * @param x (B, T, D), w (D, K), bias (D).
 * @param window decoding (docs/design.md#decoding-state-of-the-recurrent-layers): the carried (B, K−1, D) inputs before
 * x's first
 *   step, overwritten with the last K−1 inputs; null: zeros before t = 0 (training, full forwards).
 * @returns y (B, T, D).
 * @throws Error naming the input whose size does not match `c`, or for a window on a recording
 *   tape (the carry has no gradient).
 */
export function conv1d(
  tape: Tape,
  x: Tensor,
  w: Tensor,
  bias: Tensor,
  c: Conv1dDims,
  label = 'conv',
  window: Tensor | null = null,
): Tensor {
  expectSize(label, 'x', x, c.b * c.t * c.d, `(B=${c.b}, T=${c.t}, D=${c.d})`);
  expectSize(label, 'w', w, c.d * c.k, `(D=${c.d}, K=${c.k})`);
  expectSize(label, 'bias', bias, c.d, `(D=${c.d})`);
  const y = tape.alloc([c.b, c.t, c.d], label);
  if (window) {
    expectInference(tape, label);
    conv1dCarryForward(tape.gpu, x, w, bias, window, y, c);
    return y;
  }
  conv1dForward(tape.gpu, x, w, bias, y, c);
  tape.record({ op: 'conv1d', x, w, bias, y, dims: c }, [x, w, bias], [y]);
  return y;
}
