/**
 * Input and output layers shared by the recurrent architectures (linear, mamba, hybrid): a
 * token embedding with no positional table (the mixers carry position themselves) and an
 * RMSNorm + tied-weight LM head, as in state-spaces/mamba `MambaLMHeadModel`.
 */
import type { Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { embedding, linear, rmsNorm } from '../autograd/ops.ts';
import { lmHeadLoss } from './head.ts';
import type { Tape } from '../autograd/tape.ts';
import { applyNeftune } from '../kernels/noise.ts';
import type { ParamSpec } from '../nn/params.ts';
import type { ForwardOptions, ForwardResult } from './model.ts';

/** An (blockSize, C) table of zeros that stands in for the positional embedding; never trained. */
export function zeroPositions(gpu: Gpu, blockSize: number, c: number): Tensor {
  return gpu.zeros([blockSize, c], 'f32', 'no_positions');
}

/**
 * x (B·T, C) = wte[tokens], plus NEFTune noise when `opts.neftune` is set (training only).
 * @throws Error when T exceeds the block size or the token count is not B·T.
 */
export function embedTokens(
  tape: Tape,
  tokens: Tensor,
  hostTokens: Int32Array,
  wte: Tensor,
  noPositions: Tensor,
  b: number,
  t: number,
  opts: ForwardOptions,
): Tensor {
  const x = embedding(tape, tokens, hostTokens, wte, noPositions, b, t); // (B, T, C)
  applyNeftune(tape.gpu, x, b, t, wte.shape[1], opts.neftune);
  return x;
}

/**
 * logits (B·T, V) = RMSNorm(x) · wteᵀ (tied to the embedding), and the mean cross-entropy when
 * targets are given; then the head runs in row chunks past a binding limit and logits may be
 * null (head.ts {@link lmHeadLoss}).
 */
export function lmHead(tape: Tape, x: Tensor, normW: Tensor, wte: Tensor, targets: Tensor | null, opts: ForwardOptions): ForwardResult {
  const xf = rmsNorm(tape, x, normW, 'norm_f'); // (B·T, C)
  if (targets) return lmHeadLoss(tape, xf, wte, targets, opts.gradScale ?? 1);
  return { logits: linear(tape, xf, wte, null, 'lm_head'), loss: null }; // (B·T, V)
}

/** Declares parameters with one call each; `std` for matrices, `value` for constants. */
export class SpecList {
  readonly specs: ParamSpec[] = [];
  matrix(name: string, shape: number[], std: number): void {
    this.specs.push({ name, shape, init: { kind: 'normal', std }, decay: true });
  }
  constant(name: string, shape: number[], value: number): void {
    this.specs.push({ name, shape, init: { kind: 'const', value }, decay: false });
  }
  /** A vector or table with per-element initial values and no weight decay. */
  values(name: string, shape: number[], at: (index: number) => number): void {
    this.specs.push({ name, shape, init: { kind: 'values', at }, decay: false });
  }
}

/** Checks that every named field is a positive integer. @throws Error naming the first that is not. */
export function checkPositive(what: string, cfg: object, keys: string[]): void {
  const rec = cfg as Record<string, unknown>;
  for (const k of keys) {
    const v = rec[k];
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 1) throw new Error(`${what}: ${k} must be a positive integer, got ${v}`);
  }
}
