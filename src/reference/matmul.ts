/** f64 CPU reference of the matmul kernel (src/kernels/matmul.ts), for tests only. */

/** Transpose flags and scales, as in {@link import('../kernels/matmul.ts').MatmulOptions}. */
export interface MatmulRefOptions {
  transA?: boolean;
  transB?: boolean;
  alpha?: number;
  beta?: number;
  /** The previous C (M·N values), scaled by beta; omitted means zeros. */
  c?: ArrayLike<number>;
}

/**
 * Returns C (M,N) = alpha·op(A)·op(B) + beta·C in f64, row-major. op(A) is (M,K): `a` stored
 * (M,K), or (K,M) when transA; op(B) is (K,N): `b` stored (K,N), or (N,K) when transB.
 * Like the kernel, C is not read when beta is 0.
 * @throws Error when an array's length does not match its shape.
 */
export function matmulRef(
  a: ArrayLike<number>,
  b: ArrayLike<number>,
  m: number,
  n: number,
  k: number,
  opts: MatmulRefOptions = {},
): Float64Array {
  const { transA = false, transB = false, alpha = 1, beta = 0 } = opts;
  if (a.length !== m * k) throw new Error(`matmulRef: a has ${a.length} values, op(A) is ${m}×${k}`);
  if (b.length !== k * n) throw new Error(`matmulRef: b has ${b.length} values, op(B) is ${k}×${n}`);
  if (beta !== 0 && opts.c?.length !== m * n) throw new Error(`matmulRef: beta ≠ 0 needs c of ${m * n} values`);
  const out = new Float64Array(m * n);
  const row = new Float64Array(n);
  for (let i = 0; i < m; i++) {
    row.fill(0);
    for (let p = 0; p < k; p++) {
      const av = transA ? a[p * m + i] : a[i * k + p];
      if (av === 0) continue;
      if (transB) {
        for (let j = 0; j < n; j++) row[j] += av * b[j * k + p];
      } else {
        const off = p * n;
        for (let j = 0; j < n; j++) row[j] += av * b[off + j];
      }
    }
    for (let j = 0; j < n; j++) {
      out[i * n + j] = alpha * row[j] + (beta !== 0 ? beta * opts.c![i * n + j] : 0);
    }
  }
  return out;
}
