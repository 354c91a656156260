/** The matmul kernel tests' check against the f64 reference, shared by every tile and path they force. */
import { assertClose, assertRelRms, randn } from './assert.ts';
import { matmul, type MatmulOptions } from '../../src/kernels/matmul.ts';
import { matmulRef } from '../../src/reference/matmul.ts';
import type { Gpu } from '../../src/gpu/context.ts';

/**
 * Runs matmul on fresh tensors and checks it against the f64 reference (tolerances:
 * docs/design.md#test-tolerances). C starts as `c0` when beta ≠ 0, else as NaNs: beta = 0 must not read C.
 */
export async function check(
  gpu: Gpu,
  m: number,
  n: number,
  k: number,
  opts: MatmulOptions,
  seed: number,
  what: string,
): Promise<void> {
  const a = randn(m * k, seed), b = randn(k * n, seed + 1), c0 = randn(m * n, seed + 2);
  const ta = gpu.upload(Float32Array.from(a), [m * k]);
  const tb = gpu.upload(Float32Array.from(b), [k * n]);
  const tc = gpu.upload(opts.beta ? Float32Array.from(c0) : new Float32Array(m * n).fill(NaN), [m, n]);
  matmul(gpu, ta, tb, tc, m, n, k, opts);
  const got = await gpu.read(tc);
  const ref = matmulRef(a, b, m, n, k, { ...opts, c: c0 });
  assertClose(got, ref, what);
  assertRelRms(got, ref, what);
  for (const t of [ta, tb, tc]) t.release();
}
