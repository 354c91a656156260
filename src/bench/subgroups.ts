/**
 * Runs benchmark work with every subgroup kernel variant turned off (matmul's tiled kernels,
 * FlashAttention's tiled forward and backward, the row reductions), so the scale suite can time
 * the workgroup-memory fallbacks beside the shipped subgroup paths on the same device in the
 * same run (docs/design.md §8).
 */
import { matmulTuning } from '../kernels/matmul.ts';
import { flashTuning } from '../kernels/flash_tuning.ts';
import { rowTuning } from '../kernels/reduce.ts';

/**
 * Calls `fn` with the three tuning switches' `subgroups` set to false and restores them after,
 * also when `fn` throws or its promise rejects. Returns what `fn` returns.
 */
export function withoutSubgroups<T>(fn: () => T): T {
  const saved = [matmulTuning.subgroups, flashTuning.subgroups, rowTuning.subgroups] as const;
  const restore = () => {
    [matmulTuning.subgroups, flashTuning.subgroups, rowTuning.subgroups] = saved;
  };
  matmulTuning.subgroups = flashTuning.subgroups = rowTuning.subgroups = false;
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
