/**
 * The decoding form of RWKV's token shift (docs/design.md#decoding-state-of-the-recurrent-layers): the shift reads the
 * token before the pass's first one from a carried row instead of zero. It is made of the training shift
 * (activations.ts) and buffer copies, no kernel of its own: the carry is one row per sequence, and a decode step (T =
 * 1) is two copies in all.
 */
import type { Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { checkDistinct, checkSize } from './attention_checks.ts';
import { tokenShiftForward } from './activations.ts';

/**
 * y (B, T, C): y[b, t] = x[b, t − 1] for t ≥ 1 and y[b, 0] = carry[b], where carry (B, C) holds
 * each sequence's token before x's first (zeros at a sequence's start); carry is then
 * overwritten with x[b, T − 1]. Passes over a sequence in pieces carrying the row give
 * {@link tokenShiftForward}'s output on the whole (BlinkDL/ChatRWKV `rwkv/model.py` keeps this
 * row per layer for the time mix and the channel mix, beside the wkv state). Encoded in order: the shift, then per sequence the
 * carried row into y and x's last row into the carry (one copy each for all rows when T = 1).
 * @throws Error when B or T is not a positive integer, x and y are not (B, T, C) f32, carry is
 *   not (B, C) f32, or y or carry shares a GPUBuffer with another operand (a copy cannot).
 */
export function tokenShiftCarryForward(gpu: Gpu, x: Tensor, y: Tensor, carry: Tensor, b: number, t: number): void {
  const what = 'tokenShiftCarryForward';
  if (!Number.isInteger(b) || !Number.isInteger(t) || b < 1 || t < 1) {
    throw new Error(`${what}: B and T must be positive integers, got B=${b}, T=${t}`);
  }
  const c = x.size / (b * t);
  if (!Number.isInteger(c) || c < 1) {
    throw new Error(`${what}: x [${x.shape}] is not (B=${b}, T=${t}, C) for a positive integer C`);
  }
  checkSize(what, 'x', x, [b, t, c]);
  checkSize(what, 'y', y, [b, t, c]);
  checkSize(what, 'carry', carry, [b, c]);
  checkDistinct(what, [['y', y], ['carry', carry]], [['x', x]]);
  if (t === 1) {
    gpu.copy(carry, y);
    gpu.copy(x, carry);
    return;
  }
  tokenShiftForward(gpu, x, y, b, t); // rows 1 … T−1; row 0 (zero) is overwritten next
  for (let r = 0; r < b; r++) {
    gpu.copy(carry.range(r * c, c), y.range(r * t * c, c));
    gpu.copy(x.range((r * t + t - 1) * c, c), carry.range(r * c, c));
  }
}
