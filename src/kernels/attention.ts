/**
 * Naive multi-head causal self-attention with a materialised (B, nh, T, T) probability
 * matrix: the baseline FlashAttention is checked and timed against. Follows llm.c's
 * `attention_forward` / `attention_backward` (and nanoGPT's non-flash path):
 *
 *   S = scale·Q Kᵀ,  P = softmax(S) (causal: s > t masked),  Y = P V
 *   dP = dY Vᵀ,  dS = P ∘ (dP − rowsum(P ∘ dP)),  dQ += scale·dS K,  dK += scale·dSᵀ Q,  dV += Pᵀ dY
 *
 * Every product is one batched strided GEMM (`mm` in shaders/attention.wgsl) that reads Q, K, V
 * and writes dQ, dK, dV in place inside the (B, T, 3C) layout, so no transposes or head splits
 * are materialised. Causal runs skip the GEMM blocks whose every entry is masked.
 */
import { f32bits, type Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { specialise } from './shaders.ts';
import { grid1d } from './grid.ts';
import { checkDistinct, checkHeadDims, checkSize } from './attention_checks.ts';
import { topkMask } from './select_k.ts';

/** Shapes of one attention call: batch, sequence length, channels (= nh·hs), heads. */
export interface AttentionDims {
  b: number;
  t: number;
  c: number;
  nh: number;
  /** Mask keys s > query t (default true). */
  causal?: boolean;
  /**
   * Forward only (inference): each query keeps its `topk` largest scores and the softmax runs
   * over them alone (kernels/select_k.ts); undefined keeps every score.
   */
  topk?: number;
}

const CAUSAL_NONE = 0;
const CAUSAL_BLOCKS = 1;
const CAUSAL_K_LE_I = 2;
const CAUSAL_K_GE_I = 3;

/** Invocations per workgroup of both entry points; matches the shader's DX·DY and SM_WG. */
const WG = 64;
/** Rows and columns of O each `mm` invocation computes. */
const BLOCK = 8;

/** Strided view of one GEMM operand: element (r, c) at off + b·sb + h·sh + r·sr + c·sc. */
interface Operand {
  t: Tensor;
  off: number;
  sb: number;
  sh: number;
  sr: number;
  sc: number;
}

/** Which blocks of one product a causal mask lets `mm` skip (see the CAUSAL_* modes in the shader). */
type Skip = 'upper' | 'k<=i' | 'k>=i';
const SKIP_MODE: Record<Skip, number> = {
  'upper': CAUSAL_BLOCKS,
  'k<=i': CAUSAL_K_LE_I,
  'k>=i': CAUSAL_K_GE_I,
};

/** One batched product O = alpha·A·B (+ O when accumulate); A m×k, B k×n, per (b, h). */
interface Product {
  a: Operand;
  b: Operand;
  o: Operand;
  m: number;
  n: number;
  k: number;
  alpha: number;
  accumulate: boolean;
  /** Work a causal mask makes skippable; ignored when not causal. */
  skip: Skip;
}

/**
 * Encodes one product, batched over (b, h) on grid z. The workgroup is dx×dy invocations of
 * 8×8 blocks; dx shrinks for narrow outputs (T×hs with small heads) so SIMD lanes on CPU
 * drivers are not spent past column n.
 */
function gemm(gpu: Gpu, d: AttentionDims, causal: boolean, g: Product): void {
  const { a, b, o } = g;
  const blocksX = Math.ceil(g.n / BLOCK);
  const dx = blocksX >= 8 ? 8 : blocksX >= 4 ? 4 : blocksX >= 2 ? 2 : 1;
  const dy = WG / dx;
  const code = specialise(gpu.shaders.attention, { DX: `${dx}u`, DY: `${dy}u` });
  // deno-fmt-ignore
  const params = new Uint32Array([
    g.m, g.n, g.k, d.nh,
    a.off, a.sb, a.sh, a.sr,
    a.sc, b.off, b.sb, b.sh,
    b.sr, b.sc, o.off, o.sb,
    o.sh, o.sr, o.sc, f32bits(g.alpha),
    g.accumulate ? 1 : 0, causal ? SKIP_MODE[g.skip] : CAUSAL_NONE, 0, 0,
  ]);
  gpu.dispatch(
    { key: `attention.mm.dx${dx}`, code, entryPoint: 'mm' },
    [a.t, b.t, o.t],
    params,
    [Math.ceil(g.n / (BLOCK * dx)), Math.ceil(g.m / (BLOCK * dy)), d.b * d.nh],
  );
}

function softmax(
  gpu: Gpu,
  entry: 'softmax_fwd' | 'softmax_bwd',
  p: Tensor | undefined,
  inout: Tensor,
  rows: number,
  t: number,
  causal: boolean,
): void {
  const params = new Uint32Array(24);
  params[21] = causal ? 1 : 0;
  params[22] = rows;
  params[23] = t;
  gpu.dispatch(
    { key: `attention.${entry}`, code: gpu.shaders.attention, entryPoint: entry },
    [p, undefined, inout],
    params,
    grid1d(rows, WG),
  );
}

/** Q, K or V (which = 0, 1, 2) of qkv or dqkv: rows are time steps, columns head channels; transposed swaps them. */
function qkvOperand(
  qkv: Tensor,
  which: 0 | 1 | 2,
  d: AttentionDims,
  hs: number,
  transposed: boolean,
): Operand {
  const c3 = 3 * d.c;
  return {
    t: qkv,
    off: which * d.c,
    sb: d.t * c3,
    sh: hs,
    sr: transposed ? 1 : c3,
    sc: transposed ? c3 : 1,
  };
}

/** att or dS (B, nh, T, T): rows queries t, columns keys s; transposed swaps them. */
function attOperand(att: Tensor, d: AttentionDims, transposed: boolean): Operand {
  const tt = d.t * d.t;
  return {
    t: att,
    off: 0,
    sb: d.nh * tt,
    sh: tt,
    sr: transposed ? 1 : d.t,
    sc: transposed ? d.t : 1,
  };
}

/** y or dy (B, T, C): rows are time steps, columns head channels. */
function btcOperand(x: Tensor, d: AttentionDims, hs: number): Operand {
  return { t: x, off: 0, sb: d.t * d.c, sh: hs, sr: d.c, sc: 1 };
}

/**
 * Multi-head self-attention forward.
 *
 * @param qkv (B, T, 3C): q = [..., 0:C], k = [..., C:2C], v = [..., 2C:3C]; head h uses channels
 *   h·hs … (h+1)·hs of each (hs = C/nh).
 * @param y (B, T, C) out, in (B, T, nh, hs) order (the heads concatenated, no transpose needed).
 * @param att (B, nh, T, T) out: the softmax probabilities P, saved for backward; masked
 *   entries (key s > query t when causal) are exact zeros.
 * Scale is 1/sqrt(hs). Three dispatches: S = scale·QKᵀ, row softmax, Y = PV; with `dims.topk`,
 * two more before the softmax keep each row's k largest scores (kernels/select_k.ts).
 * @throws Error when a shape does not match `dims`, or when writable outputs share a GPUBuffer
 *   with another operand.
 */
export function attentionForward(
  gpu: Gpu,
  qkv: Tensor,
  y: Tensor,
  att: Tensor,
  dims: AttentionDims,
): void {
  const what = 'attentionForward';
  const hs = checkHeadDims(what, dims);
  const { b, t, c, nh } = dims;
  const causal = dims.causal ?? true;
  checkSize(what, 'qkv', qkv, [b, t, 3 * c]);
  checkSize(what, 'y', y, [b, t, c]);
  checkSize(what, 'att', att, [b, nh, t, t]);
  checkDistinct(what, [['y', y], ['att', att]], [['qkv', qkv]]);
  const scale = 1 / Math.sqrt(hs);

  const q = qkvOperand(qkv, 0, dims, hs, false);
  const kT = qkvOperand(qkv, 1, dims, hs, true);
  const v = qkvOperand(qkv, 2, dims, hs, false);
  const p = attOperand(att, dims, false);
  // deno-fmt-ignore
  {
    gemm(gpu, dims, causal, { a: q, b: kT, o: p, m: t, n: t, k: hs, alpha: scale, accumulate: false, skip: 'upper' });
    if (dims.topk !== undefined) topkMask(gpu, att, { rows: b * nh * t, n: t, k: dims.topk, causal });
    softmax(gpu, 'softmax_fwd', undefined, att, b * nh * t, t, causal);
    gemm(gpu, dims, causal, { a: p, b: v, o: btcOperand(y, dims, hs), m: t, n: hs, k: t, alpha: 1, accumulate: false, skip: 'k<=i' });
  }
}

/**
 * Multi-head self-attention backward: dqkv (B, T, 3C) += ∂L/∂qkv, given dy (B, T, C) = ∂L/∂y
 * and the probabilities att (B, nh, T, T) saved by {@link attentionForward} with the same dims.
 * Uses one pooled (B, nh, T, T) scratch for dP / dS, released once the work is encoded.
 * Five dispatches: dP = dY Vᵀ, dS = P ∘ (dP − rowsum(P∘dP)), dQ += scale·dS K,
 * dK += scale·dSᵀ Q, dV += Pᵀ dY.
 * @throws Error when a shape does not match `dims`, or when dqkv shares a GPUBuffer with an input.
 */
export function attentionBackward(
  gpu: Gpu,
  qkv: Tensor,
  att: Tensor,
  dy: Tensor,
  dqkv: Tensor,
  dims: AttentionDims,
): void {
  const what = 'attentionBackward';
  const hs = checkHeadDims(what, dims);
  const { b, t, c, nh } = dims;
  const causal = dims.causal ?? true;
  checkSize(what, 'qkv', qkv, [b, t, 3 * c]);
  checkSize(what, 'att', att, [b, nh, t, t]);
  checkSize(what, 'dy', dy, [b, t, c]);
  checkSize(what, 'dqkv', dqkv, [b, t, 3 * c]);
  checkDistinct(what, [['dqkv', dqkv]], [['qkv', qkv], ['att', att], ['dy', dy]]);
  const scale = 1 / Math.sqrt(hs);

  const ds = gpu.empty([b, nh, t, t], 'f32', 'attention.dS');
  try {
    const q = qkvOperand(qkv, 0, dims, hs, false);
    const k = qkvOperand(qkv, 1, dims, hs, false);
    const vT = qkvOperand(qkv, 2, dims, hs, true);
    const dyOp = btcOperand(dy, dims, hs);
    const dsOp = attOperand(ds, dims, false);
    const dsT = attOperand(ds, dims, true);
    const pT = attOperand(att, dims, true);
    const [dq, dk, dv] = ([0, 1, 2] as const).map((i) => qkvOperand(dqkv, i, dims, hs, false));
    // deno-fmt-ignore
    {
      gemm(gpu, dims, causal, { a: dyOp, b: vT, o: dsOp, m: t, n: t, k: hs, alpha: 1, accumulate: false, skip: 'upper' });
      softmax(gpu, 'softmax_bwd', att, ds, b * nh * t, t, causal);
      gemm(gpu, dims, causal, { a: dsOp, b: k, o: dq, m: t, n: hs, k: t, alpha: scale, accumulate: true, skip: 'k<=i' });
      gemm(gpu, dims, causal, { a: dsT, b: q, o: dk, m: t, n: hs, k: t, alpha: scale, accumulate: true, skip: 'k>=i' });
      gemm(gpu, dims, causal, { a: pT, b: dyOp, o: dv, m: t, n: hs, k: t, alpha: 1, accumulate: true, skip: 'k>=i' });
    }
  } finally {
    ds.release();
  }
}
