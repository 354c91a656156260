/**
 * Mixed precision of the linear layers (Micikevicius et al., "Mixed Precision Training", arXiv
 * 1710.03740; torch.autocast's op list, where matmuls run in half precision and reductions,
 * norms and the loss in f32). Under a tape's `autocast` the matmuls of ops.ts `linear` read half
 * precision copies of x and w, and its backward a half precision copy of dy; every matmul
 * accumulates and writes f32 (docs/design.md#mixed-precision):
 * - 'f16': real f16 storage (shader-f16); a value past ±65 504 becomes ±inf, which the dynamic
 *   loss scaler of the trainer (train/loss_scale.ts) detects and skips;
 * - 'bf16': bf16 rounding kept in f32 storage (emulated, any adapter): f32's exponent range, so
 *   no loss scaling, and 8 bits of mantissa instead of 24.
 * Master weights, gradients and AdamW state stay f32.
 */
import type { Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { castToF16, requireF16, roundToBf16 } from '../kernels/cast.ts';
import type { Tape } from './tape.ts';

/** The training precisions (`--precision`, train/config.ts). */
export const PRECISIONS = ['f32', 'f16-mixed', 'bf16-mixed'] as const;
export type Precision = (typeof PRECISIONS)[number];

/** The half precision a tape's linear layers run in. */
export type Autocast = 'f16' | 'bf16';

/** The autocast mode of a precision; null for f32. */
export function autocastOf(precision: Precision): Autocast | null {
  return precision === 'f16-mixed' ? 'f16' : precision === 'bf16-mixed' ? 'bf16' : null;
}

/**
 * Throws unless the adapter can run `precision`: f16-mixed needs shader-f16; bf16 is emulated.
 * @throws Error naming the precision, the missing feature and what to use instead.
 */
export function checkPrecision(gpu: Gpu, precision: Precision): void {
  if (precision !== 'f16-mixed') return;
  try {
    requireF16(gpu, '--precision f16-mixed');
  } catch (e) {
    throw new Error(`${(e as Error).message} or bf16-mixed (emulated on any adapter)`);
  }
}

/** A copy of `t` in `mode`'s storage: f16, or bf16-rounded f32. The caller owns it. */
export function halfCopy(gpu: Gpu, mode: Autocast, t: Tensor, label = `${t.label}.${mode}`): Tensor {
  const out = gpu.empty(t.shape, mode === 'f16' ? 'f16' : 'f32', label);
  if (mode === 'f16') castToF16(gpu, t, out);
  else roundToBf16(gpu, t, out);
  return out;
}

/**
 * `t` as the tape's linear layers read it under its autocast mode: one copy per tensor and tape
 * (a tied weight read by the embedding's head and a recomputed block's second forward is cast
 * once), released with the tape.
 */
export function castOperand(tape: Tape, mode: Autocast, t: Tensor): Tensor {
  let c = tape.casts.get(t.id);
  if (!c) {
    c = halfCopy(tape.gpu, mode, t);
    tape.onDispose(() => c!.release());
    tape.casts.set(t.id, c);
  }
  return c;
}
