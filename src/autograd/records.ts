/**
 * What each autograd op saves for its backward, as one exhaustive table (jax-js's typed rule
 * table): adding an op to {@link OpRecords} makes a missing rule in rules.ts a compile error.
 * The Tape (tape.ts) records nodes of these shapes; the rules read them.
 */
import type { Autocast } from './autocast.ts';
import type { Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import type { Tape } from './tape.ts';
import type { TokenIndex } from '../kernels/embedding.ts';
import type { Conv1dDims, LinearAttentionDims, ScanDims } from './mixer_ops.ts';
import type { MoERecords } from './moe_ops.ts';

/** Attention geometry: batch, sequence, width, heads. */
export interface AttnDims {
  b: number;
  t: number;
  c: number;
  nh: number;
  causal?: boolean;
  /** Each query keeps its `topk` largest scores (inference; kernels/attention.ts). */
  topk?: number;
}

/** What each op saves for its backward pass. Adding an op here forces a rule in rules.ts. */
export interface OpRecords {
  /** y (N, Cout) = x (N, Cin) · wᵀ (Cin, Cout) + b (Cout) */
  /** `half`: under autocast, the half precision copies of x and w the matmuls read (autocast.ts) */
  linear: {
    x: Tensor;
    w: Tensor;
    b: Tensor | null;
    y: Tensor;
    n: number;
    cin: number;
    cout: number;
    half: { mode: Autocast; x: Tensor; w: Tensor } | null;
  };
  /** y (n, C) = rows [r0, r0+n) of x (N, C), a view of x's memory (no copy); see ops.ts rowSlice */
  rowSlice: { x: Tensor; y: Tensor; r0: number; n: number; c: number };
  /** y = a + b */
  add: { a: Tensor; b: Tensor; y: Tensor };
  /** y = GELU(x) */
  gelu: { x: Tensor; y: Tensor };
  /** y (N, C) = LayerNorm(x) · w + b, with saved mean and rstd (N) */
  layerNorm: { x: Tensor; w: Tensor; b: Tensor; y: Tensor; mean: Tensor; rstd: Tensor };
  /** y (B, T, C) = causal self-attention of qkv (B, T, 3C); att (B, nh, T, T) saved */
  attention: { qkv: Tensor; y: Tensor; att: Tensor; dims: AttnDims };
  /** y (B, T, C) = FlashAttention-2 of qkv (B, T, 3C); only lse (B, nh, T) saved */
  /** `half`: under autocast, the half precision copy of qkv the kernels read (autocast.ts) */
  flashAttention: { qkv: Tensor; y: Tensor; lse: Tensor; dims: AttnDims; half: Tensor | null };
  /** y (B, T, C) = wte[tokens] + wpe[0:T] */
  embedding: { index: TokenIndex; wte: Tensor; wpe: Tensor; y: Tensor; b: number; t: number };
  /** loss (2) = [mean cross-entropy of logits (N, V) against targets (N), count]; terminal */
  crossEntropy: { logits: Tensor; targets: Tensor; lse: Tensor; loss: Tensor; gradScale: number; cols?: number };
  /** y (N, C) = x · rstd · w (RMSNorm), rstd (N) saved */
  rmsNorm: { x: Tensor; w: Tensor; y: Tensor; rstd: Tensor; eps: number };
  /** y = x·σ(x) */
  silu: { x: Tensor; y: Tensor };
  /** y = σ(x) */
  sigmoid: { x: Tensor; y: Tensor };
  /** y = relu(x)² */
  reluSquared: { x: Tensor; y: Tensor };
  /** y = scale·logσ(x) */
  logSigmoid: { x: Tensor; y: Tensor; scale: number };
  /** y = a ∘ b */
  mul: { a: Tensor; b: Tensor; y: Tensor };
  /** y (B, T, C) = x shifted one step along T, zero at t = 0 */
  tokenShift: { x: Tensor; y: Tensor; b: number; t: number };
  /** y (N, C) = a + μ ∘ (b − a), μ (C) */
  lerp: { a: Tensor; b: Tensor; mu: Tensor; y: Tensor };
  /** y (N, C) = x ∘ s, s (C) */
  scaleChannels: { x: Tensor; s: Tensor; y: Tensor };
  /** o (B, T, H·V) = chunked scalar-decay linear attention; chunk-boundary states saved (mixer_ops.ts) */
  linearAttention: { q: Tensor; k: Tensor; v: Tensor; g: Tensor; o: Tensor; states: Tensor; dims: LinearAttentionDims };
  /** o (B, T, H·V) = per-channel-decay recurrence with bonus u (RWKV-6 / GLA) */
  recurrentLinearAttention: {
    q: Tensor;
    k: Tensor;
    v: Tensor;
    w: Tensor;
    u: Tensor | null;
    o: Tensor;
    dims: LinearAttentionDims;
  };
  /** out (B, T, D) = Mamba selective scan, gated by silu(z); chunk-boundary states saved */
  selectiveScan: {
    u: Tensor;
    delta: Tensor;
    A: Tensor;
    Bm: Tensor;
    Cm: Tensor;
    D: Tensor;
    bias: Tensor;
    z: Tensor | null;
    out: Tensor;
    states: Tensor;
    dims: ScanDims;
  };
  /** y (B, T, D) = causal depthwise conv1d of x with w (D, K) and bias (D) */
  conv1d: { x: Tensor; w: Tensor; bias: Tensor; y: Tensor; dims: Conv1dDims };
  /**
   * y = a communication step between ranks (collective.ts): Megatron's f/g operators,
   * sequence-parallel gathers, Ulysses and MoE all-to-alls. `backward` maps dy to dx on the
   * host and runs the conjugate collective; it is asynchronous, so only backwardAsync runs it.
   */
  collective: { x: Tensor; y: Tensor; name: string; backward: (dy: Float32Array) => Promise<Float32Array> };
  /**
   * y = a recomputed segment (checkpoint.ts): the forward kept only its inputs xs and y;
   * `recompute` runs the segment again on a tape of its own, backpropagates dy through it into
   * each input's gradient dxs[i] (null: none wanted) and the parameters, and frees it; given
   * `deferW` it runs phase B only and hands the tape over for phase W (split.ts). `touched`:
   * every tensor the segment's ops read (its parameters among them), for bookkeeping that asks
   * which parameters a node accumulates into.
   */
  checkpoint: {
    xs: Tensor[];
    y: Tensor;
    name: string;
    touched: Tensor[];
    recompute: (dy: Tensor | null, dxs: (Tensor | null)[], deferW?: (child: Tape) => void) => Promise<void>;
  };
  /** Mixture-of-experts ops (moe_ops.ts): router softmax and gates, dispatch / combine gathers, per-expert Linear, load-balancing loss */
  moeSoftmax: MoERecords['moeSoftmax'];
  moeGates: MoERecords['moeGates'];
  moeDispatch: MoERecords['moeDispatch'];
  moeCombine: MoERecords['moeCombine'];
  moeExpertLinear: MoERecords['moeExpertLinear'];
  moeAuxLoss: MoERecords['moeAuxLoss'];
}

export type OpName = keyof OpRecords;
export type Node = { [K in OpName]: { op: K } & OpRecords[K] }[OpName];

/** What a rule sees: the output gradient and where to accumulate input gradients. */
export interface GradContext {
  gpu: Gpu;
  /** Gradient of an op output, or null when nothing flowed into it. */
  grad(t: Tensor): Tensor | null;
  /** The buffer to accumulate t's gradient into (zeroed on first use), or null if t needs none. */
  acc(t: Tensor): Tensor | null;
}

/** One VJP per op; the mapped type makes the table exhaustive. Communication rules are asynchronous. */
export type RuleTable = { [K in OpName]: (g: GradContext, r: OpRecords[K]) => void | Promise<void> };
