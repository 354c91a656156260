/**
 * Helpers shared by the recurrent architectures (linear, mamba, hybrid): the frozen zero table
 * that stands in for a positional embedding (the mixers carry position themselves), parameter
 * declarations and config checks. Their embedding and tied LM head are the context's
 * (context.ts `embed` / `head`).
 */
import type { Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import type { ParamSpec } from '../nn/params.ts';
import { embeddingInit } from './vocab_pad.ts';

/** An (blockSize, C) table of zeros that stands in for the positional embedding; never trained. */
export function zeroPositions(gpu: Gpu, blockSize: number, c: number): Tensor {
  return gpu.zeros([blockSize, c], 'f32', 'no_positions');
}

/** Declares parameters with one call each; `std` for matrices, `value` for constants. */
export class SpecList {
  readonly specs: ParamSpec[] = [];
  matrix(name: string, shape: number[], std: number): void {
    this.specs.push({ name, shape, init: { kind: 'normal', std }, decay: true });
  }
  /**
   * The (V', C) token embedding: N(0, std) on the `real` first rows, zero on --pad-vocab
   * padding (models/vocab_pad.ts embeddingInit).
   */
  embedding(name: string, shape: [number, number], std: number, real: number): void {
    this.specs.push({ name, shape, init: embeddingInit(std, real, shape[1]), decay: true });
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
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 1) {
      throw new Error(`${what}: ${k} must be a positive integer, got ${v}`);
    }
  }
}
