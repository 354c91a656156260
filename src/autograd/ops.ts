/**
 * Differentiable forward ops. Each allocates its outputs on the tape, encodes the forward
 * kernel and records what its rule (rules.ts) needs. Shapes are checked here so a wrong
 * model wiring fails with a message instead of a GPU validation error.
 */
import { matmul } from '../kernels/matmul.ts';
import { add as addKernel, geluForward } from '../kernels/elementwise.ts';
import { layerNormForward } from '../kernels/layernorm.ts';
import { attentionForward } from '../kernels/attention.ts';
import { flashAttentionForward } from '../kernels/flash_attention.ts';
import { buildTokenIndex, embeddingForward } from '../kernels/embedding.ts';
import { crossEntropyForward } from '../kernels/cross_entropy.ts';
import { rmsNormForward } from '../kernels/rmsnorm.ts';
import { Tensor } from '../gpu/tensor.ts';
import type { Tape } from './tape.ts';
import { castOperand } from './autocast.ts';
import { expect } from './expect.ts';

export { lerp, logSigmoid, mul, reluSquared, scaleChannels, sigmoid, silu, tokenShift } from './activation_ops.ts';
import type { AttnDims } from './records.ts';

/**
 * y (N, Cout) = x (N, Cin) · wᵀ + b, w (Cout, Cin) as torch.nn.Linear. The bias is added by
 * the matmul's epilogue as y is written (llm.c's matmul_forward), not by a second pass over y.
 * Under the tape's autocast the matmul reads half precision copies of x and w (autocast.ts).
 */
export function linear(tape: Tape, x: Tensor, w: Tensor, b: Tensor | null, label = 'linear'): Tensor {
  const [cout, cin] = w.shape;
  const n = x.size / cin;
  expect(Number.isInteger(n), () => `${label}: input [${x.shape}] is not a multiple of in_features ${cin}`);
  expect(!b || b.size === cout, () => `${label}: bias of ${b?.size} for out_features ${cout}`);
  const y = tape.alloc([n, cout], label);
  const mode = tape.autocast;
  const half = mode && { mode, x: castOperand(tape, mode, x), w: castOperand(tape, mode, w) };
  matmul(tape.gpu, half?.x ?? x, half?.w ?? w, y, n, cout, cin, { transB: true, bias: b });
  tape.record({ op: 'linear', x, w, b, y, n, cin, cout, half }, [x, w, b], [y]);
  return y;
}

/**
 * Rows [r0, r0+n) of t viewed as (N, c): a tensor over the same memory, shape (n, c), never
 * released on its own. WebGPU binds a buffer range only at offsets that are multiples of the
 * device's minStorageBufferOffsetAlignment (256 bytes on most adapters), so the view's byte
 * offset t.offset + r0·c·4 must be one; pick r0 as a multiple of alignment/4 rows.
 * @throws Error when the rows fall outside t or the offset is not aligned.
 */
export function rowView(t: Tensor, r0: number, n: number, c: number, what = 'rowView'): Tensor {
  const rows = t.size / c;
  expect(
    Number.isInteger(rows) && Number.isInteger(r0) && Number.isInteger(n) && r0 >= 0 && n >= 1 && r0 + n <= rows,
    () =>
      `${what}: rows [${r0}, ${r0 + n}) of [${t.shape}] viewed as (${rows}, ${c}); need integers 0 ≤ r0 < r0 + n ≤ N`,
  );
  const offset = t.offset + r0 * c * 4;
  const align = t.gpu.device.limits.minStorageBufferOffsetAlignment;
  expect(
    offset % align === 0,
    () =>
      `${what}: row ${r0} of [${t.shape}] starts at byte ${offset}, not a multiple of minStorageBufferOffsetAlignment ${align}`,
  );
  return new Tensor(t.gpu, t.buffer, c === 1 ? [n] : [n, c], t.dtype, offset, false, `${t.label}[${r0}:${r0 + n}]`);
}

/**
 * y (n, C) = rows [r0, r0+n) of x (N, C) as a tensor of their own, without a copy (a view of
 * x's memory, see {@link rowView}); the backward adds y's gradient into rows [r0, r0+n) of
 * x's gradient. Lets the LM head run over row chunks so no single logits binding exceeds the
 * device limit (chunked cross-entropy as in Liger-Kernel / Apple's cut-cross-entropy).
 * @throws Error when x is not (N, C), the rows fall outside it, or r0·C·4 bytes is not a
 *   multiple of the device's minStorageBufferOffsetAlignment.
 */
export function rowSlice(tape: Tape, x: Tensor, r0: number, n: number, label = 'rows'): Tensor {
  const c = x.shape[x.shape.length - 1];
  expect(x.shape.length >= 2 && c > 0, () => `${label}: x [${x.shape}] is not (N, C)`);
  const y = rowView(x, r0, n, c, label);
  tape.record({ op: 'rowSlice', x, y, r0, n, c }, [x], [y]);
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
 * log-sum-exp) instead of the T×T probabilities. Under the tape's autocast the kernels read a half
 * precision copy of qkv (f32 math; autocast.ts).
 */
export function flashAttention(tape: Tape, qkv: Tensor, dims: AttnDims, label = 'attn'): Tensor {
  const { b, t, c, nh } = dims;
  expect(qkv.size === b * t * 3 * c, () => `${label}: qkv [${qkv.shape}] is not (B=${b}, T=${t}, 3C=${3 * c})`);
  const y = tape.alloc([b, t, c], label);
  const lse = tape.alloc([b, nh, t], `${label}.lse`);
  const half = tape.autocast && castOperand(tape, tape.autocast, qkv);
  flashAttentionForward(tape.gpu, half || qkv, y, lse, dims);
  tape.record({ op: 'flashAttention', qkv, y, lse, dims, half: half || null }, [qkv], [y]);
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
  expect(
    tokens.size === b * t && hostTokens.length === b * t,
    () => `embedding: tokens [${tokens.shape}] is not (B=${b}, T=${t})`,
  );
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
 * `gradScale` multiplies the gradient (1/micro-batches under gradient accumulation). `cols`
 * (default V) counts the real classes: columns ≥ cols are a padded vocabulary, left out of
 * the softmax and of the gradient (kernels/cross_entropy.ts).
 */
export function crossEntropy(tape: Tape, logits: Tensor, targets: Tensor, gradScale = 1, cols?: number): Tensor {
  const n = targets.size;
  expect(logits.size % n === 0, () => `crossEntropy: logits [${logits.shape}] vs targets [${targets.shape}]`);
  const lse = tape.alloc([n], 'lse');
  const loss = tape.alloc([2], 'loss');
  crossEntropyForward(tape.gpu, logits, targets, lse, loss, cols);
  tape.record({ op: 'crossEntropy', logits, targets, lse, loss, gradScale, cols }, [logits], [loss]);
  return loss;
}

// ---- primitives of the RWKV / Mamba / hybrid blocks (kernels/rmsnorm.ts, kernels/activations.ts)

/**
 * y (N, C) = RMSNorm over the last dimension (Zhang & Sennrich, arXiv 1910.07467; Mamba's
 * norm): x · rstd · w with rstd = 1/√(mean(x²) + 1e-5) saved (N), x (N, C), w (C).
 * @throws Error when w's length C does not divide x.
 */
export function rmsNorm(tape: Tape, x: Tensor, w: Tensor, label = 'rmsnorm'): Tensor {
  const c = w.size;
  const n = x.size / c;
  expect(
    c > 0 && Number.isInteger(n),
    () => `${label}: x [${x.shape}] is not (N, C) for the gain w [${w.shape}] (C=${c})`,
  );
  const eps = 1e-5;
  const y = tape.alloc([n, c], label);
  const rstd = tape.alloc([n], `${label}.rstd`);
  rmsNormForward(tape.gpu, x.view([n, c]), w, y, rstd, eps);
  tape.record({ op: 'rmsNorm', x, w, y, rstd, eps }, [x, w], [y]);
  return y;
}
