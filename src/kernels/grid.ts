/** Workgroup-count helpers shared by the kernels' TS side. */

/**
 * A 2D grid of `wg`-wide workgroups covering `n` invocations without exceeding 65 535
 * workgroups per dimension; shaders index with `i = gid.x + gid.y * groups.x * wg`.
 */
export function grid1d(n: number, wg: number): [number, number] {
  const groups = Math.ceil(n / wg);
  if (groups <= 65535) return [groups, 1];
  const y = Math.ceil(groups / 65535);
  return [Math.ceil(groups / y), y];
}
