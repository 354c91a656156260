// The bias epilogue of matmul (C = alpha·op(A)·op(B) + beta·C + bias) on every path the
// dispatcher can take: the CPU kernel storing C directly (N % 4 == 0), through partials and
// the reduce pass (ragged N), with K split over grid z, the GPU shared-memory kernel (forced
// on the CPU adapter), and the unfused two-pass fallback. Reference: f64 matmulRef + bias.
import { gpuTest } from '../util/gpu.ts';
import { assertClose, assertRelRms, randn } from '../util/assert.ts';
import { matmul, type MatmulOptions, matmulTuning } from '../../src/kernels/matmul.ts';
import { matmulRef } from '../../src/reference/matmul.ts';
import { Tensor } from '../../src/gpu/tensor.ts';
import type { Gpu } from '../../src/gpu/context.ts';

/** Throws unless `fn` throws an Error whose message contains `part`. */
function assertThrows(fn: () => unknown, part: string): void {
  try {
    fn();
  } catch (e) {
    if (!(e instanceof Error) || !e.message.includes(part)) {
      throw new Error(`expected an error containing '${part}', got: ${e}`);
    }
    return;
  }
  throw new Error(`expected an error containing '${part}', but nothing was thrown`);
}

/** The f64 reference: matmulRef plus bias[j] on column j of every row. */
function biasRef(
  a: Float64Array,
  b: Float64Array,
  bias: Float64Array,
  m: number,
  n: number,
  k: number,
  opts: MatmulOptions & { c?: Float64Array },
): Float64Array {
  const out = matmulRef(a, b, m, n, k, {
    transA: opts.transA,
    transB: opts.transB,
    alpha: opts.alpha,
    beta: opts.beta,
    c: opts.c,
  });
  for (let i = 0; i < m; i++) for (let j = 0; j < n; j++) out[i * n + j] += bias[j];
  return out;
}

/**
 * Runs matmul with a bias on fresh tensors and checks it against the reference. The bias is a
 * slice at a 256-byte offset of a buffer with NaN guards on both sides (as parameters live in
 * one flat buffer), so a read past its N values would show. C starts as NaNs when beta = 0.
 * @returns the number of dispatches the call encoded.
 */
async function check(
  gpu: Gpu,
  m: number,
  n: number,
  k: number,
  opts: MatmulOptions,
  seed: number,
  what: string,
): Promise<number> {
  const transA = opts.transA ?? false, transB = opts.transB ?? false;
  const a = randn(m * k, seed),
    b = randn(k * n, seed + 1),
    c0 = randn(m * n, seed + 2),
    bias = randn(n, seed + 3, -2, 2);
  // Deno's WebGPU cannot write 0 bytes: K = 0 operands are empty pool tensors instead.
  const ta = k ? gpu.upload(Float32Array.from(a), transA ? [k, m] : [m, k]) : gpu.empty([0]);
  const tb = k ? gpu.upload(Float32Array.from(b), transB ? [n, k] : [k, n]) : gpu.empty([0]);
  const tc = gpu.upload(opts.beta ? Float32Array.from(c0) : new Float32Array(m * n).fill(NaN), [m, n]);
  const host = new Float32Array(64 + n + 64).fill(NaN);
  host.set(Float32Array.from(bias), 64);
  const whole = gpu.upload(host, [host.length]);
  const tbias = new Tensor(gpu, whole.buffer, [n], 'f32', 256, false, 'bias slice');
  const before = gpu.dispatchCount;
  matmul(gpu, ta, tb, tc, m, n, k, { ...opts, bias: tbias });
  const dispatches = gpu.dispatchCount - before;
  const got = await gpu.read(tc);
  const ref = biasRef(a, b, bias, m, n, k, { ...opts, c: c0 });
  assertClose(got, ref, what);
  assertRelRms(got, ref, what);
  for (const t of [ta, tb, tc, whole]) t.release();
  return dispatches;
}

const S = [1, 17, 63, 113];
/**
 * (M, N, K) = (rows, out_features, in_features). Each ragged size in each position, then N a
 * multiple of 4 but not of the 16-column tile (the CPU kernel's direct store path), then small
 * outputs over a long K (split-K: partials reduced over grid z).
 */
const CASES: [number, number, number][] = [
  ...S.map((_, i): [number, number, number] => [S[i], S[(i + 1) % 4], S[(i + 2) % 4]]),
  [63, 68, 113],
  [113, 20, 17],
  [17, 20, 1299],
  [7, 17, 2001],
];
/** transB (linear's layout) or not, crossed with a plain product or an accumulate into C. */
const VARIANTS: MatmulOptions[] = [
  { transB: true },
  { transB: false },
  { transB: true, alpha: -0.75, beta: 1 },
  { transB: false, alpha: 2, beta: 0.5 },
];

function name(o: MatmulOptions): string {
  return `${o.transA ? 'T' : 'N'}${o.transB ? 'T' : 'N'} alpha ${o.alpha ?? 1} beta ${o.beta ?? 0}`;
}

/** Runs every case × variant with the tuning knobs set as given, restoring them after. */
async function sweep(gpu: Gpu, tuning: Partial<typeof matmulTuning>, label: string): Promise<void> {
  const saved = { ...matmulTuning };
  Object.assign(matmulTuning, tuning);
  try {
    for (const [i, [m, n, k]] of CASES.entries()) {
      for (const [j, o] of VARIANTS.entries()) {
        await check(gpu, m, n, k, o, 100 * i + 10 * j + 1, `${label} ${m}×${n}×${k} ${name(o)}`);
      }
    }
    await check(gpu, 63, 17, 113, { transA: true, transB: true, beta: 1 }, 7, `${label} TT 63×17×113 beta 1`);
  } finally {
    Object.assign(matmulTuning, saved);
  }
}

gpuTest('matmul bias epilogue, CPU register-tiled kernel: ragged M, N, K, transB, beta, split-K', async (gpu) => {
  await sweep(gpu, { forceRegister: true, fuseBias: true }, 'cpu');
});

for (const tile of [64, 128] as const) {
  gpuTest(
    `matmul bias epilogue, GPU shared-memory kernel ${tile}² (forced): ragged M, N, K, transB, beta`,
    async (gpu) => {
      await sweep(gpu, { forceTiled: true, tile, fuseBias: true }, `tiled ${tile}`);
    },
  );
}

gpuTest('matmul bias, unfused fallback (product, then addBiasInPlace) gives the same results', async (gpu) => {
  await sweep(gpu, { forceTiled: false, fuseBias: false }, 'unfused');
});

gpuTest('matmul bias: fused costs no extra dispatch, split-K adds it once in the reduce', async (gpu) => {
  // The CPU kernel's paths (forced, so a GPU run checks them too). K a multiple of 4, so no
  // operand needs a padded copy: direct store (N % 4 == 0) is one dispatch fused; split-K is
  // the kernel over grid z, then the reduce that adds the bias.
  matmulTuning.forceRegister = true;
  const paths: [string, number, number, number, MatmulOptions, number][] = [
    ['direct', 63, 68, 116, { transB: true }, 1],
    ['split-K accumulating', 17, 20, 1300, { transB: true, beta: 1 }, 2],
  ];
  for (const [i, [what, m, n, k, o, want]] of paths.entries()) {
    const fused = await check(gpu, m, n, k, o, 901 + i, `${what} fused`);
    if (fused !== want) throw new Error(`${what} path, fused: ${fused} dispatches, expected ${want}`);
    matmulTuning.fuseBias = false;
    try {
      const unfused = await check(gpu, m, n, k, o, 911 + i, `${what} unfused`);
      if (unfused !== want + 1) {
        throw new Error(`${what} path, unfused: ${unfused} dispatches, expected ${want + 1} (add_bias after)`);
      }
    } finally {
      matmulTuning.fuseBias = true;
    }
  }
  matmulTuning.forceRegister = false;
});

gpuTest('matmul bias with K = 0: C = beta·C + bias on both kernels', async (gpu) => {
  for (const forceTiled of [false, true]) {
    Object.assign(matmulTuning, { forceTiled, forceRegister: !forceTiled });
    try {
      for (const beta of [0, 0.5]) await check(gpu, 5, 7, 0, { beta }, 950, `K = 0 beta ${beta} tiled ${forceTiled}`);
    } finally {
      Object.assign(matmulTuning, { forceTiled: false, forceRegister: false });
    }
  }
});

gpuTest('matmul bias: wrong size or overlap with C throw clear errors', async (gpu) => {
  const a = gpu.empty([6, 4]), b = gpu.empty([5, 4]), c = gpu.empty([6, 5]), bias4 = gpu.empty([4]);
  assertThrows(
    () => matmul(gpu, a, b, c, 6, 5, 4, { transB: true, bias: bias4 }),
    'matmul: the bias must be f32 of N = 5 elements',
  );
  const cAndBias = gpu.empty([35]);
  const cv = new Tensor(gpu, cAndBias.buffer, [6, 5], 'f32', cAndBias.offset, false);
  const bv = new Tensor(gpu, cAndBias.buffer, [5], 'f32', cAndBias.offset + 4 * 28, false);
  assertThrows(() => matmul(gpu, a, b, cv, 6, 5, 4, { transB: true, bias: bv }), 'matmul: C overlaps the bias');
  for (const t of [a, b, c, bias4, cAndBias]) t.release();
  await gpu.sync();
});
