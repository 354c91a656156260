/**
 * Argument checks shared by the attention kernels (naive and flash): they fail with the
 * tensor's name, its shape and what was expected, before anything reaches the GPU.
 */
import type { Tensor } from '../gpu/tensor.ts';

/** Batch, sequence, width, heads of one attention call. */
export interface HeadDims {
  b: number;
  t: number;
  c: number;
  nh: number;
}

/**
 * Returns the head size c / nh.
 * @throws Error when a dimension is not a positive integer or nh does not divide c.
 */
export function checkHeadDims(what: string, d: HeadDims): number {
  for (const k of ['b', 't', 'c', 'nh'] as const) {
    if (!Number.isInteger(d[k]) || d[k] < 1) {
      throw new Error(`${what}: dims.${k} must be a positive integer, got ${d[k]}`);
    }
  }
  if (d.c % d.nh !== 0) {
    throw new Error(`${what}: channels c=${d.c} not divisible by heads nh=${d.nh}`);
  }
  return d.c / d.nh;
}

/** @throws Error when t's element count or dtype differ from an f32 tensor of `shape`. */
export function checkSize(what: string, name: string, t: Tensor, shape: number[]): void {
  const n = shape.reduce((x, y) => x * y, 1);
  if (t.size !== n) {
    throw new Error(
      `${what}: ${name} has shape [${t.shape}] (${t.size} elements), expected [${shape}]`,
    );
  }
  if (t.dtype !== 'f32') throw new Error(`${what}: ${name} must be f32, got ${t.dtype}`);
}

/**
 * @throws Error when a writable tensor shares its GPUBuffer with any other operand: WebGPU
 *   rejects a buffer bound writable together with another binding of it.
 */
export function checkDistinct(
  what: string,
  writable: [string, Tensor][],
  others: [string, Tensor][],
): void {
  const all = [...writable, ...others];
  for (let i = 0; i < writable.length; i++) {
    for (let j = 0; j < all.length; j++) {
      const [wn, w] = writable[i];
      const [on, o] = all[j];
      if (i !== j && o.buffer === w.buffer) {
        throw new Error(
          `${what}: ${wn} and ${on} share one GPUBuffer; WebGPU cannot bind a writable buffer together with another binding of it`,
        );
      }
    }
  }
}
