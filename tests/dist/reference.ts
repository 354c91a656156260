/**
 * CPU references for the collectives (f64 arithmetic, rounded once to the output dtype) and
 * the deterministic integer-valued inputs the tests feed every rank, so each rank can check
 * its own result without shipping data back to the host.
 */
import type { NumArray, ReduceOp } from '../../src/dist/communicator.ts';

export type DT = 'f32' | 'i32';

/** Integer-valued input of group rank `r` for case `seed`: values in −50…50. */
export function input(dt: DT, r: number, n: number, seed: number): NumArray {
  const a = dt === 'f32' ? new Float32Array(n) : new Int32Array(n);
  for (let i = 0; i < n; i++) a[i] = ((r * 131 + i * 17 + seed * 7 + 1000) % 101) - 50;
  return a;
}

/** Elementwise reduction of `xs` (one per rank); avg = exact sum / p, rounded once. */
export function reduceRef(xs: NumArray[], op: ReduceOp): number[] {
  const n = xs[0].length;
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const v = xs.map((x) => x[i]);
    if (op === 'sum') out.push(v.reduce((a, b) => a + b, 0));
    else if (op === 'avg') out.push(v.reduce((a, b) => a + b, 0) / xs.length);
    else if (op === 'max') out.push(Math.max(...v));
    else out.push(Math.min(...v));
  }
  return out;
}

/** The same values stored in `like`'s dtype (f32 rounding or i32). */
export function as(like: NumArray, v: ArrayLike<number>): NumArray {
  return like instanceof Float32Array ? Float32Array.from(v) : Int32Array.from(v);
}

/** "" when bit-identical (Object.is per element, same dtype and length), else the first difference. */
export function diff(got: NumArray, want: NumArray): string {
  if (got.constructor !== want.constructor) return `dtype ${got.constructor.name} vs ${want.constructor.name}`;
  if (got.length !== want.length) return `length ${got.length} vs ${want.length}`;
  for (let i = 0; i < got.length; i++) {
    if (!Object.is(got[i], want[i])) return `[${i}] ${got[i]} vs ${want[i]}`;
  }
  return '';
}
