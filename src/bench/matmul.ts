/**
 * Matmul benchmark: the shipped kernel (src/kernels/matmul.ts) against the plain 16×16
 * shared-memory tile kernel, measured in the same run on the same inputs, so their ratio is
 * meaningful even on a busy CPU-WebGPU machine where absolute numbers wander (docs/design.md#runtime-quirks).
 */
import type { Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { matmul, type MatmulOptions, matmulPlain, matmulTuning } from '../kernels/matmul.ts';
import { type BenchTiming, fill, timeKernels } from './timing.ts';

export type { BenchTiming };

/** One timed (shape, kernel) pair. */
export interface MatmulBenchRow {
  m: number;
  n: number;
  k: number;
  kernel: 'shipped' | 'plain';
  /** Median wall time of one matmul, GPU work included (ms). */
  ms: number;
  /** 2·M·N·K / time. */
  gflops: number;
  /** This row's GFLOP/s over the plain kernel's at the same shape (1 for plain itself). */
  ratio: number;
}

/** A shipped-kernel timing on a non-square shape with transpose flags (no plain baseline). */
export interface MatmulShapeRow {
  name: string;
  m: number;
  n: number;
  k: number;
  layout: string;
  ms: number;
  gflops: number;
}

/** Runs `fn` on fresh A (M·K), B (K·N) and C (M,N) tensors, released afterwards. */
function withOperands<T>(
  gpu: Gpu,
  m: number,
  n: number,
  k: number,
  fn: (a: Tensor, b: Tensor, c: Tensor) => Promise<T>,
): Promise<T> {
  const a = gpu.upload(fill(m * k, 1), [m * k], 'f32', 'bench.a');
  const b = gpu.upload(fill(k * n, 2), [k * n], 'f32', 'bench.b');
  const c = gpu.upload(fill(m * n, 3), [m, n], 'f32', 'bench.c');
  return fn(a, b, c).finally(() => {
    for (const t of [a, b, c]) t.release();
  });
}

/**
 * Benchmarks C = A·B at M = N = K = each of `sizes` with the shipped kernel and the plain
 * 16×16 tile kernel, on the same tensors, in alternating repetitions that each wait for the
 * GPU (`gpu.sync()`). GFLOP/s = 2·M·N·K / time; ratio = plain time / shipped time (medians).
 * @returns two rows per size (shipped, then plain) with the ratio of their GFLOP/s.
 */
export async function benchMatmul(gpu: Gpu, sizes: number[], timing: BenchTiming = {}): Promise<MatmulBenchRow[]> {
  const t = { reps: 5, minRepMs: 100, maxMsPerShape: 15_000, ...timing };
  const rows: MatmulBenchRow[] = [];
  for (const s of sizes) {
    const [m, n, k] = [s, s, s];
    await withOperands(gpu, m, n, k, async (a, b, c) => {
      const [shipped, plain] = await timeKernels(gpu, [
        (batch) => {
          for (let i = 0; i < batch; i++) matmul(gpu, a, b, c, m, n, k);
        },
        (batch) => {
          for (let i = 0; i < batch; i++) matmulPlain(gpu, a, b, c, m, n, k);
        },
      ], t);
      const gf = (ms: number) => (2 * m * n * k) / (ms * 1e6);
      rows.push({ m, n, k, kernel: 'shipped', ms: shipped, gflops: gf(shipped), ratio: plain / shipped });
      rows.push({ m, n, k, kernel: 'plain', ms: plain, gflops: gf(plain), ratio: 1 });
    });
  }
  return rows;
}

/**
 * The matmuls of a training step of the `nanogpt-cpu`-sized GPT (n_embd 128, B·T = 1024,
 * vocab 65): forward x·Wᵀ (NT), dX = dY·W (NN, accumulating) and dW += dYᵀ·X (TN).
 */
export const TRAINING_SHAPES: { name: string; m: number; n: number; k: number; opts: MatmulOptions }[] = [
  { name: 'qkv fwd x·Wᵀ', m: 1024, n: 384, k: 128, opts: { transB: true } },
  { name: 'mlp fwd x·Wᵀ', m: 1024, n: 512, k: 128, opts: { transB: true } },
  { name: 'head fwd x·Wᵀ', m: 1024, n: 65, k: 128, opts: { transB: true } },
  { name: 'mlp dX += dY·W', m: 1024, n: 128, k: 512, opts: { beta: 1 } },
  { name: 'head dX += dY·W', m: 1024, n: 128, k: 65, opts: { beta: 1 } },
  { name: 'mlp dW += dYᵀ·X', m: 512, n: 128, k: 1024, opts: { transA: true, beta: 1 } },
  { name: 'attn-proj dW += dYᵀ·X', m: 128, n: 128, k: 1024, opts: { transA: true, beta: 1 } },
  { name: 'dW over B·T = 8192', m: 128, n: 128, k: 8192, opts: { transA: true, beta: 1 } },
];

/** Times the shipped kernel on `shapes` (default: {@link TRAINING_SHAPES}). */
export async function benchMatmulShapes(
  gpu: Gpu,
  shapes = TRAINING_SHAPES,
  timing: BenchTiming = {},
): Promise<MatmulShapeRow[]> {
  const t = { reps: 5, minRepMs: 100, maxMsPerShape: 15_000, ...timing };
  const rows: MatmulShapeRow[] = [];
  for (const { name, m, n, k, opts } of shapes) {
    await withOperands(gpu, m, n, k, async (a, b, c) => {
      // beta = 1 would grow C without bound over many repetitions; its cost is the same at 1e-9.
      const o = opts.beta ? { ...opts, beta: 1e-9 } : opts;
      const [ms] = await timeKernels(gpu, [(batch) => {
        for (let i = 0; i < batch; i++) matmul(gpu, a, b, c, m, n, k, o);
      }], t);
      const layout = `${opts.transA ? 'T' : 'N'}${opts.transB ? 'T' : 'N'}${opts.beta ? ' β=1' : ''}`;
      rows.push({ name, m, n, k, layout, ms, gflops: (2 * m * n * k) / (ms * 1e6) });
    });
  }
  return rows;
}

/** Fused vs unfused bias of one forward linear shape (see {@link benchBiasEpilogue}). */
export interface BiasBenchRow {
  name: string;
  m: number;
  n: number;
  k: number;
  /** Median ms of matmul with the bias epilogue. */
  fusedMs: number;
  /** Median ms of matmul, then addBiasInPlace over C. */
  unfusedMs: number;
  /** unfusedMs / fusedMs: above 1 when the epilogue is faster. */
  ratio: number;
}

/**
 * Times y (M,N) = x (M,K)·wᵀ + b with the bias in the matmul epilogue against the two-pass
 * sequence (`matmulTuning.fuseBias = false`: matmul, then addBiasInPlace), on the same
 * tensors in alternating repetitions, at the forward shapes of {@link TRAINING_SHAPES} plus
 * the two (N,128)-output projections of a GPT block.
 */
export async function benchBiasEpilogue(gpu: Gpu, timing: BenchTiming = {}): Promise<BiasBenchRow[]> {
  const t = { reps: 7, minRepMs: 100, maxMsPerShape: 15_000, ...timing };
  const shapes = [
    ...TRAINING_SHAPES.filter((s) => s.opts.transB && !s.opts.beta),
    { name: 'attn-proj fwd x·Wᵀ', m: 1024, n: 128, k: 128 },
    { name: 'mlp-proj fwd x·Wᵀ', m: 1024, n: 128, k: 512 },
  ];
  const rows: BiasBenchRow[] = [];
  for (const { name, m, n, k } of shapes) {
    const bias = gpu.upload(fill(n, 4), [n], 'f32', 'bench.bias');
    await withOperands(gpu, m, n, k, async (a, b, c) => {
      const run = (fused: boolean) => (batch: number) => {
        const before = matmulTuning.fuseBias;
        matmulTuning.fuseBias = fused;
        try {
          for (let i = 0; i < batch; i++) matmul(gpu, a, b, c, m, n, k, { transB: true, bias });
        } finally {
          matmulTuning.fuseBias = before;
        }
      };
      const [fusedMs, unfusedMs] = await timeKernels(gpu, [run(true), run(false)], t);
      rows.push({ name, m, n, k, fusedMs, unfusedMs, ratio: unfusedMs / fusedMs });
    }).finally(() => bias.release());
  }
  return rows;
}
