/**
 * Differentiable forward ops. Each allocates its outputs on the tape, encodes the forward
 * kernel and records what its rule (rules.ts) needs. Shapes are checked here so a wrong
 * model wiring fails with a message instead of a GPU validation error.
 */
import { matmul } from '../kernels/matmul.ts';
import { add as addKernel, addBiasInPlace, geluForward } from '../kernels/elementwise.ts';
import { layerNormForward } from '../kernels/layernorm.ts';
import { attentionForward } from '../kernels/attention.ts';
import { flashAttentionForward } from '../kernels/flash_attention.ts';
import { buildTokenIndex, embeddingForward } from '../kernels/embedding.ts';
import { crossEntropyForward } from '../kernels/cross_entropy.ts';
import type { Tensor } from '../gpu/tensor.ts';
import type { AttnDims, Tape } from './tape.ts';

function expect(cond: boolean, msg: () => string): void {
  if (!cond) throw new Error(msg());
}

/** y (N, Cout) = x (N, Cin) · wᵀ + b, w (Cout, Cin) as torch.nn.Linear. */
export function linear(tape: Tape, x: Tensor, w: Tensor, b: Tensor | null, label = 'linear'): Tensor {
  const [cout, cin] = w.shape;
  const n = x.size / cin;
  expect(Number.isInteger(n), () => `${label}: input [${x.shape}] is not a multiple of in_features ${cin}`);
  expect(!b || b.size === cout, () => `${label}: bias of ${b?.size} for out_features ${cout}`);
  const y = tape.alloc([n, cout], label);
  matmul(tape.gpu, x, w, y, n, cout, cin, { transB: true });
  if (b) addBiasInPlace(tape.gpu, y, b);
  tape.record({ op: 'linear', x, w, b, y, n, cin, cout }, [x, w, b], [y]);
  return y;
}

/** y = a + b (equal sizes), the residual connection. */
export function add(tape: Tape, a: Tensor, b: Tensor, label = 'add'): Tensor {
  expect(a.size === b.size, () => `${label}: [${a.shape}] + [${b.shape}]`);
  const y = tape.alloc(a.shape, label);
  addKernel(tape.gpu, a, b, y);
  tape.record({ op: 'add', a, b, y }, [a, b], [y]);
  return y;
}

/** y = GELU(x), tanh approximation. */
export function gelu(tape: Tape, x: Tensor, label = 'gelu'): Tensor {
  const y = tape.alloc(x.shape, label);
  geluForward(tape.gpu, x, y);
  tape.record({ op: 'gelu', x, y }, [x], [y]);
  return y;
}

/** y (N, C) = LayerNorm over the last dimension, x (N, C), w and b (C). */
export function layerNorm(tape: Tape, x: Tensor, w: Tensor, b: Tensor, label = 'ln'): Tensor {
  const c = w.size;
  const n = x.size / c;
  expect(Number.isInteger(n) && b.size === c, () => `${label}: x [${x.shape}], w [${w.shape}], b [${b.shape}]`);
  const y = tape.alloc([n, c], label);
  const mean = tape.alloc([n], `${label}.mean`);
  const rstd = tape.alloc([n], `${label}.rstd`);
  layerNormForward(tape.gpu, x, w, b, y, mean, rstd);
  tape.record({ op: 'layerNorm', x, w, b, y, mean, rstd }, [x, w, b], [y]);
  return y;
}

/** y (B, T, C) = multi-head self-attention of qkv (B, T, 3C), T×T probabilities saved. */
export function attention(tape: Tape, qkv: Tensor, dims: AttnDims, label = 'attn'): Tensor {
  const { b, t, c, nh } = dims;
  expect(qkv.size === b * t * 3 * c, () => `${label}: qkv [${qkv.shape}] is not (B=${b}, T=${t}, 3C=${3 * c})`);
  expect(c % nh === 0, () => `${label}: width ${c} not divisible by ${nh} heads`);
  const y = tape.alloc([b, t, c], label);
  const att = tape.alloc([b, nh, t, t], `${label}.att`);
  attentionForward(tape.gpu, qkv, y, att, dims);
  tape.record({ op: 'attention', qkv, y, att, dims }, [qkv], [y]);
  return y;
}

/**
 * y (B, T, C) = multi-head self-attention of qkv (B, T, 3C) by FlashAttention-2 (Dao,
 * arXiv 2307.08691): the same result as {@link attention} with O(T) saved state (the row
 * log-sum-exp) instead of the T×T probabilities.
 */
export function flashAttention(tape: Tape, qkv: Tensor, dims: AttnDims, label = 'attn'): Tensor {
  const { b, t, c, nh } = dims;
  expect(qkv.size === b * t * 3 * c, () => `${label}: qkv [${qkv.shape}] is not (B=${b}, T=${t}, 3C=${3 * c})`);
  const y = tape.alloc([b, t, c], label);
  const lse = tape.alloc([b, nh, t], `${label}.lse`);
  flashAttentionForward(tape.gpu, qkv, y, lse, dims);
  tape.record({ op: 'flashAttention', qkv, y, lse, dims }, [qkv], [y]);
  return y;
}

/**
 * y (B, T, C) = wte[tokens] + wpe[0:T]. `tokens` is (B, T) on the GPU; `hostTokens` the same
 * ids on the host, from which the backward pass's per-token position index is built.
 */
export function embedding(
  tape: Tape,
  tokens: Tensor,
  hostTokens: Int32Array,
  wte: Tensor,
  wpe: Tensor,
  b: number,
  t: number,
): Tensor {
  const [vocab, c] = wte.shape;
  expect(tokens.size === b * t && hostTokens.length === b * t, () => `embedding: tokens [${tokens.shape}] is not (B=${b}, T=${t})`);
  expect(t <= wpe.shape[0], () => `embedding: sequence length ${t} exceeds block size ${wpe.shape[0]}`);
  const y = tape.alloc([b, t, c], 'emb');
  embeddingForward(tape.gpu, tokens, wte, wpe, y, b, t);
  if (tape.recording && (tape.requiresGrad(wte) || tape.requiresGrad(wpe))) {
    const index = buildTokenIndex(tape.gpu, hostTokens, vocab);
    tape.onDispose(() => index.release());
    tape.record({ op: 'embedding', index, wte, wpe, y, b, t }, [wte, wpe], [y]);
  }
  return y;
}

/**
 * Mean cross-entropy of logits (N, V) against targets (N, i32; < 0 ignored).
 * Returns loss (2) = [mean loss, count of counted rows], still on the GPU.
 * `gradScale` multiplies the gradient (1/micro-batches under gradient accumulation).
 */
export function crossEntropy(tape: Tape, logits: Tensor, targets: Tensor, gradScale = 1): Tensor {
  const n = targets.size;
  expect(logits.size % n === 0, () => `crossEntropy: logits [${logits.shape}] vs targets [${targets.shape}]`);
  const lse = tape.alloc([n], 'lse');
  const loss = tape.alloc([2], 'loss');
  crossEntropyForward(tape.gpu, logits, targets, lse, loss);
  tape.record({ op: 'crossEntropy', logits, targets, lse, loss, gradScale }, [logits], [loss]);
  return loss;
}
