/**
 * The tied LM head and cross-entropy of a training step, split over row chunks when the full
 * logits (N, V) would not fit one storage binding: a GPT-2 vocabulary (V = 50 257) at N = 1024
 * rows is 206 MB, over lavapipe's 128 MiB maxStorageBufferBindingSize. Each chunk of ≤ R rows
 * gets its own logits tensor, small enough to bind, in the manner of Liger-Kernel's fused
 * linear cross-entropy and Apple's cut-cross-entropy (Wijmans et al., arXiv 2411.09009); unlike
 * them every chunk's logits stay on the tape, since the point is the per-binding limit, not the
 * total memory. With one chunk the head is exactly the unchunked linear + crossEntropy.
 */
import { Tensor } from '../gpu/tensor.ts';
import { DeviceLimitError } from '../gpu/limits.ts';
import type { Gpu } from '../gpu/context.ts';
import { crossEntropy, linear, rowSlice, rowView } from '../autograd/ops.ts';
import type { Tape } from '../autograd/tape.ts';
import { axpy } from '../kernels/elementwise.ts';

/**
 * Test-only knob (as matmul.ts's `matmulTuning`): `maxRows` > 0 caps the rows per chunk
 * (rounded down to the alignment granule, at least one granule), so tests can force chunking
 * with small shapes. 0 = derive the chunk from the device limits only.
 */
export const headTuning = { maxRows: 0 };

/**
 * Rows whose byte offsets every chunk boundary must respect: row r0 of targets (N) i32 and of
 * xf (N, C) must both start at a multiple of minStorageBufferOffsetAlignment; r0 a multiple of
 * alignment/4 satisfies both for any C.
 */
export function headRowGranule(gpu: Gpu): number {
  return Math.max(1, gpu.device.limits.minStorageBufferOffsetAlignment / 4);
}

/**
 * The most rows R of logits (R, V) one chunk may hold: ⌊min(maxStorageBufferBindingSize,
 * maxBufferSize) / (4·V)⌋ rounded down to {@link headRowGranule}, capped by headTuning.maxRows.
 * @throws DeviceLimitError (maxStorageBufferBindingSize) when not even one granule of rows fits.
 * @throws Error when V is not a positive integer.
 */
export function headChunkRows(gpu: Gpu, vocab: number): number {
  if (!Number.isInteger(vocab) || vocab < 1) {
    throw new Error(`headChunkRows: vocabulary size must be a positive integer, got ${vocab}`);
  }
  const g = headRowGranule(gpu);
  const lim = gpu.device.limits;
  const fit = Math.floor(Math.min(lim.maxStorageBufferBindingSize, lim.maxBufferSize) / (4 * vocab));
  let rows = Math.floor(fit / g) * g;
  if (rows < g) {
    throw new DeviceLimitError(
      'maxStorageBufferBindingSize',
      g * vocab * 4,
      lim.maxStorageBufferBindingSize,
      `LM head logits of ${g} rows × vocabulary ${vocab} (the smallest aligned chunk)`,
    );
  }
  const cap = headTuning.maxRows;
  if (cap > 0) rows = Math.min(rows, Math.max(g, Math.floor(cap / g) * g));
  return rows;
}

/** Element i of t as a one-element tensor, for buffer-to-buffer copies (4-byte aligned only). */
function element(t: Tensor, i: number): Tensor {
  return t.range(i, 1, `${t.label}[${i}]`);
}

/**
 * logits = xf · wteᵀ (tied head) and the mean cross-entropy against targets, over row chunks
 * of ≤ {@link headChunkRows} rows when N·V·4 bytes exceed a binding.
 *
 * Chunked, chunk i's loss (2) = [mean_i, count_i] is recorded as usual; afterwards every
 * chunk's saved count is overwritten with the total count Σ count_i, so each chunk's backward
 * adds (softmax − onehot)·gradScale/total — exactly the unchunked gradient, ignored rows
 * (targets < 0, e.g. goldfish) included. The returned loss (2) = [Σ (n_i/N)·mean_i, total],
 * built outside the tape; its mean equals the unchunked mean when no target is ignored, and
 * is the row-weighted mean of the chunk means otherwise (the GPU kernels at hand cannot divide
 * by the total count without a read-back).
 *
 * @param xf (N, C) final hidden states, @param wte (V, C) tied embedding / output weight,
 * @param targets (N) i32 class ids (< 0 ignored), any shape of N elements
 * @param gradScale multiplies the loss gradient (1/micro-batches under gradient accumulation)
 * @param realVocab the real vocabulary V ≤ wte rows (default all rows): logits columns ≥ V are
 *   --pad-vocab padding, left out of the softmax (see crossEntropy)
 * @returns logits (N, V) with one chunk, null when chunked (the chunks' logits are tape
 *   temporaries); loss (2) = [mean loss, count of counted targets] on the GPU
 * @throws Error when the shapes disagree; DeviceLimitError when even one aligned chunk of rows
 *   does not fit a binding.
 */
export function lmHeadLoss(
  tape: Tape,
  xf: Tensor,
  wte: Tensor,
  targets: Tensor,
  gradScale = 1,
  realVocab?: number,
): { logits: Tensor | null; loss: Tensor } {
  const [vocab, c] = wte.shape;
  const n = targets.size;
  if (
    wte.shape.length !== 2 || xf.size !== n * c || xf.shape[xf.shape.length - 1] !== c || xf.shape.length < 2 || n < 1
  ) {
    throw new Error(
      `lmHeadLoss: xf [${xf.shape}] must be (N, C) for targets [${targets.shape}] (N=${n} ≥ 1) and wte [${wte.shape}] (V, C)`,
    );
  }
  if (targets.dtype !== 'i32') throw new Error(`lmHeadLoss: targets must be i32, got ${targets.dtype}`);
  const lim = tape.gpu.device.limits;
  const fits = n * vocab * 4 <= Math.min(lim.maxStorageBufferBindingSize, lim.maxBufferSize);
  const rows = fits && headTuning.maxRows <= 0 ? n : headChunkRows(tape.gpu, vocab);
  if (rows >= n) {
    const logits = linear(tape, xf, wte, null, 'lm_head'); // (N, V)
    return { logits, loss: crossEntropy(tape, logits, targets, gradScale, realVocab) };
  }
  const gpu = tape.gpu;
  const loss = tape.alloc([2], 'loss');
  const total = tape.alloc([2], 'loss.total'); // [Σ mean_i (unused), Σ count_i]
  gpu.clear(loss);
  gpu.clear(total);
  const parts: Tensor[] = [];
  for (let r0 = 0; r0 < n; r0 += rows) {
    const m = Math.min(rows, n - r0);
    // Slices xf itself, not a reshaped view: the tape tracks gradients by tensor identity.
    const xs = rowSlice(tape, xf, r0, m, `lm_head.x[${r0}]`); // (m, C)
    const logits = linear(tape, xs, wte, null, `lm_head[${r0}]`); // (m, V)
    const part = crossEntropy(tape, logits, rowView(targets, r0, m, 1, 'lmHeadLoss targets'), gradScale, realVocab);
    axpy(gpu, m / n, part, loss);
    axpy(gpu, 1, part, total);
    parts.push(part);
  }
  gpu.copy(element(total, 1), element(loss, 1));
  for (const part of parts) gpu.copy(element(total, 1), element(part, 1));
  return { logits: null, loss };
}
