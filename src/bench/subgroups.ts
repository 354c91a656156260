/**
 * Runs benchmark work with the subgroup kernel variants on or off (matmul's tiled kernels,
 * FlashAttention's tiled forward and backward, the row reductions), so the scale suite times
 * both on a device that has `subgroups`, in the same run
 * (docs/design.md#subgroup-paths-of-the-matmul-and-flash-inner-loops).
 */
import type { Gpu } from '../gpu/context.ts';

/**
 * Calls `fn` with `gpu.subgroups` set to `on` (true only where the device has `subgroups`) and
 * restores it after, also when `fn` throws or its promise rejects. Returns what `fn` returns.
 */
export function withSubgroups<T>(gpu: Gpu, on: boolean, fn: () => T): T {
  const saved = gpu.subgroups;
  const restore = () => {
    gpu.subgroups = saved;
  };
  gpu.subgroups = on && gpu.features.has('subgroups');
  let out: T;
  try {
    out = fn();
  } catch (e) {
    restore();
    throw e;
  }
  if (out instanceof Promise) return out.finally(restore) as T;
  restore();
  return out;
}
