/**
 * The elementwise and token-mixing primitives of the RWKV-style and Mamba models (forward side;
 * their rules are in rules.ts beside the others): gates, activations, the token shift and the
 * per-channel interpolation. Re-exported by ops.ts, where the models import every op from.
 */
import {
  lerpForward,
  logSigmoidForward,
  mulForward,
  reluSquaredForward,
  scaleChannelsForward,
  sigmoidForward,
  siluForward,
  tokenShiftForward,
} from '../kernels/activations.ts';
import { tokenShiftCarryForward } from '../kernels/token_shift.ts';
import type { Tensor } from '../gpu/tensor.ts';
import type { Tape } from './tape.ts';
import { expect, expectInference } from './expect.ts';

/** y = silu(x) = x·σ(x), the shape of x (Mamba's gate). */
export function silu(tape: Tape, x: Tensor, label = 'silu'): Tensor {
  const y = tape.alloc(x.shape, label);
  siluForward(tape.gpu, x, y);
  tape.record({ op: 'silu', x, y }, [x], [y]);
  return y;
}

/** y = σ(x), the shape of x (RWKV's receptance gate). */
export function sigmoid(tape: Tape, x: Tensor, label = 'sigmoid'): Tensor {
  const y = tape.alloc(x.shape, label);
  sigmoidForward(tape.gpu, x, y);
  tape.record({ op: 'sigmoid', x, y }, [x], [y]);
  return y;
}

/** y = relu(x)², the shape of x (RWKV's channel mix). */
export function reluSquared(tape: Tape, x: Tensor, label = 'relu2'): Tensor {
  const y = tape.alloc(x.shape, label);
  reluSquaredForward(tape.gpu, x, y);
  tape.record({ op: 'reluSquared', x, y }, [x], [y]);
  return y;
}

/**
 * y = scale·logσ(x), the shape of x: a log-decay gate g = logσ(x)/τ with scale = 1/τ.
 * @throws Error when scale is not finite.
 */
export function logSigmoid(tape: Tape, x: Tensor, scale: number, label = 'logsigmoid'): Tensor {
  expect(Number.isFinite(scale), () => `${label}: scale must be a finite number, got ${scale}`);
  const y = tape.alloc(x.shape, label);
  logSigmoidForward(tape.gpu, x, y, scale);
  tape.record({ op: 'logSigmoid', x, y, scale }, [x], [y]);
  return y;
}

/** y = a ∘ b (equal sizes; the shape of a). @throws Error when the sizes differ. */
export function mul(tape: Tape, a: Tensor, b: Tensor, label = 'mul'): Tensor {
  expect(a.size === b.size, () => `${label}: [${a.shape}] ∘ [${b.shape}] needs equal sizes`);
  const y = tape.alloc(a.shape, label);
  mulForward(tape.gpu, a, b, y);
  tape.record({ op: 'mul', a, b, y }, [a, b], [y]);
  return y;
}

/**
 * y (B, T, C) = x (B, T, C) shifted one step along T, zero at t = 0 of each sequence
 * (RWKV's token shift, BlinkDL/RWKV-LM).
 * @param carry decoding (docs/design.md#decoding-state-of-the-recurrent-layers): the (B, C) row before x's first token,
 * read as
 *   y's row 0 and overwritten with x's last row; null: zeros (training, full forwards).
 * @throws Error when B, T are not positive integers or x is not (B, T, C), or for a carry on a
 *   recording tape (the carry has no gradient) or of another shape than (B, C).
 */
export function tokenShift(
  tape: Tape,
  x: Tensor,
  b: number,
  t: number,
  label = 'shift',
  carry: Tensor | null = null,
): Tensor {
  const c = x.size / (b * t);
  expect(
    Number.isInteger(b) && Number.isInteger(t) && b > 0 && t > 0 && Number.isInteger(c) && c > 0,
    () => `${label}: x [${x.shape}] is not (B=${b}, T=${t}, C) with positive integers B, T, C`,
  );
  const y = tape.alloc([b, t, c], label);
  if (carry) {
    expectInference(tape, label);
    expect(carry.size === b * c, () => `${label}: carry [${carry.shape}] is not (B=${b}, C=${c})`);
    tokenShiftCarryForward(tape.gpu, x, y, carry, b, t);
    return y;
  }
  tokenShiftForward(tape.gpu, x, y, b, t);
  tape.record({ op: 'tokenShift', x, y, b, t }, [x], [y]);
  return y;
}

/**
 * y (N, C) = a + μ ∘ (b − a): RWKV's time mix of a (N, C) and b (N, C) with a learned
 * per-channel μ (C) broadcast over rows.
 * @throws Error when a and b differ in size or μ's length does not divide them.
 */
export function lerp(tape: Tape, a: Tensor, b: Tensor, mu: Tensor, label = 'lerp'): Tensor {
  const c = mu.size;
  expect(
    a.size === b.size && c > 0 && a.size % c === 0,
    () => `${label}: a [${a.shape}], b [${b.shape}] must be equal-sized (N, C) for μ [${mu.shape}] (C=${c})`,
  );
  const y = tape.alloc([a.size / c, c], label);
  lerpForward(tape.gpu, a, b, mu, y);
  tape.record({ op: 'lerp', a, b, mu, y }, [a, b, mu], [y]);
  return y;
}

/**
 * y (N, C) = x (N, C) ∘ s (C), s broadcast over rows (gates, skip scales).
 * @throws Error when s's length does not divide x.
 */
export function scaleChannels(tape: Tape, x: Tensor, s: Tensor, label = 'scale'): Tensor {
  const c = s.size;
  expect(c > 0 && x.size % c === 0, () => `${label}: x [${x.shape}] is not (N, C) for s [${s.shape}] (C=${c})`);
  const y = tape.alloc([x.size / c, c], label);
  scaleChannelsForward(tape.gpu, x, s, y);
  tape.record({ op: 'scaleChannels', x, s, y }, [x, s], [y]);
  return y;
}
