/** f64/host references of the reductions in src/kernels/reduce.ts. */

/** Number of elements of `x` that are ±Inf or NaN (kernels/reduce.ts `countNonFinite`). */
export function countNonFiniteRef(x: ArrayLike<number>): number {
  let k = 0;
  for (let i = 0; i < x.length; i++) if (!Number.isFinite(x[i])) k++;
  return k;
}
