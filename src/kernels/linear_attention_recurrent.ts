/**
 * Recurrent linear attention with per-channel decay and bonus u (GLA / RWKV-6; BlinkDL/RWKV-LM
 * `RWKV-v5/cuda/wkv6_cuda.cu`, docs/design.md#recurrent-linear-attention-with-a-per-channel-decay). Per (batch, head),
 * state S (K×V):
 *   S_t = diag(e^{w_t}) S_{t−1} + k_tᵀ v_t,
 *   o_t = scale · q_t (diag(e^{w_t}) S_{t−1} + diag(u) k_tᵀ v_t).
 * With u = 1 (pass null) and w_t = g_t broadcast over K it equals the chunked kernel of
 * linear_attention.ts, which the tests check it against. Equations of the backward and the
 * per-entry loop trips: shaders/linear_attention_recurrent.wgsl.
 *
 * Layouts: q, k, w (B, T, H·K) with head h at channels h·K … (h+1)·K − 1; v, o (B, T, H·V);
 * w is the log-decay (≤ 0); u (H·K).
 *
 * Dispatches: every sequential sweep over T runs ⌈T / laSteps(⌈max(K, V)/4⌉ + 2)⌉ dispatches
 * (one up to T ≈ 1000 at K = V = 128 on the 34k-trip budget) carrying its state in a pooled
 * scratch. Forward: one sweep; its decoding form {@link linearAttentionStateUpdate} runs the
 * same sweep in the caller's carried state instead of the scratch. Backward: `lr_dq` (forward
 * sweep), `lr_dk`, `lr_dv` (reverse sweeps), `lr_dw` (reverse cumsum, T per 34k rows) and
 * `lr_du` (one dispatch, sum over B).
 */
import { f32bits, type Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { grid1d } from './grid.ts';
import { checkDistinct, checkSize } from './attention_checks.ts';
import { checkLinearAttentionDims, laSteps, type LinearAttentionDims } from './linear_attention.ts';

const WG = 64;

interface Offsets {
  p: number;
  c: number;
  du: number;
}

/** How the forward sweep reads its operands: decoding starts from a carried state, the head decay is (B, T, H). */
interface Form {
  carried: boolean;
  wHead: boolean;
}

const TRAINING: Form = { carried: false, wHead: false };

function params(
  d: LinearAttentionDims,
  lo: number,
  hi: number,
  first: boolean,
  hasU: boolean,
  off: Offsets,
  wHead = false,
): Uint32Array {
  // deno-fmt-ignore
  return new Uint32Array([
    d.b, d.t, d.h, d.dk, d.dv, lo, hi, first ? 1 : 0,
    f32bits(d.scale), hasU ? 1 : 0, off.p, off.c, off.du, Math.ceil(d.dv / 4), Math.ceil(d.dk / 4), wHead ? 1 : 0,
  ]);
}

/**
 * Runs `entry` over rows [0, T) in dispatches of `steps` rows, forwards or in reverse; the first
 * dispatch starts from a zero state unless the form carries one in.
 */
function sweep(
  gpu: Gpu,
  entry: string,
  slots: (Tensor | undefined)[],
  d: LinearAttentionDims,
  items: number,
  steps: number,
  reverse: boolean,
  hasU: boolean,
  off: Offsets,
  form: Form = TRAINING,
): void {
  const k = {
    key: `linear_attention_recurrent.${entry}`,
    code: gpu.shaders.linear_attention_recurrent,
    entryPoint: entry,
  };
  const ranges: [number, number][] = [];
  for (let lo = 0; lo < d.t; lo += steps) ranges.push([lo, Math.min(d.t, lo + steps)]);
  if (reverse) ranges.reverse();
  ranges.forEach(([lo, hi], n) => {
    const first = n === 0 && !form.carried;
    gpu.dispatch(k, slots, params(d, lo, hi, first, hasU, off, form.wHead), grid1d(items, WG));
  });
}

function checkInputs(
  what: string,
  q: Tensor,
  k: Tensor,
  v: Tensor,
  w: Tensor,
  u: Tensor | null,
  d: LinearAttentionDims,
  wHead = false,
): void {
  checkLinearAttentionDims(what, d);
  checkSize(what, 'q', q, [d.b, d.t, d.h * d.dk]);
  checkSize(what, 'k', k, [d.b, d.t, d.h * d.dk]);
  checkSize(what, 'v', v, [d.b, d.t, d.h * d.dv]);
  checkSize(what, 'w', w, wHead ? [d.b, d.t, d.h] : [d.b, d.t, d.h * d.dk]);
  if (u) checkSize(what, 'u', u, [d.h * d.dk]);
}

/**
 * Forward: o (B, T, H·V), overwritten, from q, k, w (B, T, H·K), v (B, T, H·V) and the bonus
 * u (H·K), or null for u = 1. One invocation per (b, h, value column); a pooled (B, H, K, V)
 * scratch carries the state between dispatches and is released once encoded.
 * @throws Error when a dim is invalid (K, V ≤ 128), a size or dtype does not match, or o shares
 *   a GPUBuffer with an input.
 */
export function recurrentLinearAttentionForward(
  gpu: Gpu,
  q: Tensor,
  k: Tensor,
  v: Tensor,
  w: Tensor,
  u: Tensor | null,
  o: Tensor,
  d: LinearAttentionDims,
): void {
  const what = 'recurrentLinearAttentionForward';
  checkInputs(what, q, k, v, w, u, d);
  checkSize(what, 'o', o, [d.b, d.t, d.h * d.dv]);
  const ins: [string, Tensor][] = [['q', q], ['k', k], ['v', v], ['w', w]];
  checkDistinct(what, [['o', o]], u ? [...ins, ['u', u]] : ins);
  const st = gpu.empty([d.b, d.h, d.dk, d.dv], 'f32', 'linear_attention_recurrent.state');
  try {
    forwardSweep(gpu, q, k, v, w, u, o, st, d, TRAINING);
  } finally {
    st.release();
  }
}

/**
 * The decoding form (docs/design.md#decoding-state-of-the-recurrent-layers; the wkv state that BlinkDL/ChatRWKV
 * `rwkv/model.py` carries per layer from token to token, fla-org/flash-linear-attention fused_recurrent's initial_state
 * and output_final_state): o (B, T, H·V) as {@link recurrentLinearAttentionForward}'s, but from the state S (B, H, K,
 * V) in `state` instead of zero, and `state` is then overwritten with S after the last step. With `headDecay`, w is (B,
 * T, H), one log-decay per head and step broadcast over K: with u = null that is the chunked kernel's recurrence
 * (linear_attention.ts), so this one kernel decodes both decay forms. Passes over a sequence in pieces carrying `state`
 * give the whole sequence's output. Dispatches as the forward's; no scratch, no gradient.
 * @throws Error as {@link recurrentLinearAttentionForward}, for a w that is not (B, T, H·K)
 *   (or (B, T, H) with headDecay), a state that is not (B, H, K, V) f32, or a state sharing a
 *   GPUBuffer with another operand.
 */
export function linearAttentionStateUpdate(
  gpu: Gpu,
  q: Tensor,
  k: Tensor,
  v: Tensor,
  w: Tensor,
  u: Tensor | null,
  o: Tensor,
  state: Tensor,
  d: LinearAttentionDims,
  headDecay = false,
): void {
  const what = 'linearAttentionStateUpdate';
  checkInputs(what, q, k, v, w, u, d, headDecay);
  checkSize(what, 'o', o, [d.b, d.t, d.h * d.dv]);
  checkSize(what, 'state', state, [d.b, d.h, d.dk, d.dv]);
  const ins: [string, Tensor][] = [['q', q], ['k', k], ['v', v], ['w', w]];
  checkDistinct(what, [['o', o], ['state', state]], u ? [...ins, ['u', u]] : ins);
  forwardSweep(gpu, q, k, v, w, u, o, state, d, { carried: true, wHead: headDecay });
}

/** `lr_fwd` over every row with the state S (B, H, K, V) in `st`: a scratch its first dispatch zeroes, or (carried) the caller's. */
function forwardSweep(
  gpu: Gpu,
  q: Tensor,
  k: Tensor,
  v: Tensor,
  w: Tensor,
  u: Tensor | null,
  o: Tensor,
  st: Tensor,
  d: LinearAttentionDims,
  form: Form,
): void {
  // Without u the shader reads 1; q stands in for the binding (read-only bindings may alias).
  const slots = [q, k, v, w, u ?? q, undefined, o, st], steps = laSteps(Math.ceil(d.dk / 4) + 2);
  sweep(gpu, 'lr_fwd', slots, d, d.b * d.h * d.dv, steps, false, u !== null, { p: 0, c: 0, du: 0 }, form);
}

/**
 * Backward: dq, dk, dw (B, T, H·K), dv (B, T, H·V) and du (H·K, summed over the batch)
 * ACCUMULATE (+=) the gradients of L given dout = ∂L/∂o (B, T, H·V), for the inputs of
 * {@link recurrentLinearAttentionForward}. du must be null exactly when u is. Pooled scratch of
 * B·H·K·V + B·T·H·K + 2·B·H·K floats, released once encoded.
 * @throws Error when a dim is invalid, a size or dtype does not match, u and du are not both
 *   given or both null, or a gradient shares a GPUBuffer with another operand.
 */
export function recurrentLinearAttentionBackward(
  gpu: Gpu,
  q: Tensor,
  k: Tensor,
  v: Tensor,
  w: Tensor,
  u: Tensor | null,
  dout: Tensor,
  dq: Tensor,
  dk: Tensor,
  dv: Tensor,
  dw: Tensor,
  du: Tensor | null,
  d: LinearAttentionDims,
): void {
  const what = 'recurrentLinearAttentionBackward';
  checkInputs(what, q, k, v, w, u, d);
  if ((u === null) !== (du === null)) {
    throw new Error(
      `${what}: u and du must both be given or both be null (u ${u ? 'given' : 'null'}, du ${du ? 'given' : 'null'})`,
    );
  }
  const qs = [d.b, d.t, d.h * d.dk];
  checkSize(what, 'dout', dout, [d.b, d.t, d.h * d.dv]);
  checkSize(what, 'dq', dq, qs);
  checkSize(what, 'dk', dk, qs);
  checkSize(what, 'dv', dv, [d.b, d.t, d.h * d.dv]);
  checkSize(what, 'dw', dw, qs);
  if (du) checkSize(what, 'du', du, [d.h * d.dk]);
  const outs: [string, Tensor][] = [['dq', dq], ['dk', dk], ['dv', dv], ['dw', dw]];
  const ins: [string, Tensor][] = [['q', q], ['k', k], ['v', v], ['w', w], ['dout', dout]];
  checkDistinct(what, du ? [...outs, ['du', du]] : outs, u ? [...ins, ['u', u]] : ins);

  const nst = d.b * d.h * d.dk * d.dv;
  const nq = d.b * d.t * d.h * d.dk;
  const nhk = d.b * d.h * d.dk;
  const off = { p: nst, c: nst + nq, du: nst + nq + nhk };
  const scr = gpu.empty([nst + nq + 2 * nhk], 'f32', 'linear_attention_recurrent.scr');
  try {
    const hasU = u !== null;
    const uu = u ?? q;
    const rowSteps = laSteps(Math.ceil(d.dv / 4) + 2);
    const colSteps = laSteps(Math.ceil(d.dk / 4) + 2);
    sweep(gpu, 'lr_dq', [q, k, v, w, uu, dout, dq, scr], d, nhk, rowSteps, false, hasU, off);
    sweep(gpu, 'lr_dk', [q, k, v, w, uu, dout, dk, scr], d, nhk, rowSteps, true, hasU, off);
    // `lr_dv` reads no v: binding what an entry point does not use is a validation error.
    sweep(
      gpu,
      'lr_dv',
      [q, k, undefined, w, uu, dout, dv, scr],
      d,
      d.b * d.h * d.dv,
      colSteps,
      true,
      hasU,
      off,
    );
    const tail = [undefined, undefined, undefined, undefined, undefined, undefined];
    sweep(gpu, 'lr_dw', [...tail, dw, scr], d, nhk, laSteps(1), true, hasU, off);
    if (du) {
      const k = {
        key: 'linear_attention_recurrent.lr_du',
        code: gpu.shaders.linear_attention_recurrent,
        entryPoint: 'lr_du',
      };
      gpu.dispatch(
        k,
        [...tail, du, scr],
        params(d, 0, d.t, true, hasU, off),
        grid1d(d.h * d.dk, WG),
      );
    }
  } finally {
    scr.release();
  }
}
