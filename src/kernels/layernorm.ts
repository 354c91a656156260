/**
 * LayerNorm over the last dimension (Ba et al., arXiv 1607.06450), as in nanoGPT and llm.c
 * (`layernorm_forward` / `layernorm_backward` in train_gpt2.c). The forward saves each row's
 * mean and reciprocal standard deviation so the backward needs no second statistics pass.
 */
import { f32bits, type Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { grid1d } from './grid.ts';
import { addColumnSums, bindingSlots, expectSize, rowKernel, ROWS_PER_CHUNK, rowShape } from './reduce.ts';

/** Elements of a row each invocation handles, roughly, on GPUs (see rowLanes). */
const PER_LANE = 8;

/** The shader's binding numbers; params follow at BINDINGS.length. */
const BINDINGS = ['x', 'w', 'b', 'y', 'mean', 'rstd', 'dy', 'dx', 'partW', 'partB'] as const;

/**
 * y = (x − mean)·rstd·w + b per row, with mean = Σx/C and rstd = 1/√(Σ(x − mean)²/C + eps)
 * (biased variance, as in PyTorch and llm.c).
 * @param x (N, C) — any shape whose last dimension is C; N is the product of the others
 * @param w (C) gain, @param b (C) bias
 * @param y (N, C) output, @param mean (N) output, @param rstd (N) output (both saved for the backward)
 * @param eps added to the variance (default 1e-5, nanoGPT's and PyTorch's)
 * @throws Error naming the tensor whose size does not match.
 */
export function layerNormForward(
  gpu: Gpu,
  x: Tensor,
  w: Tensor,
  b: Tensor,
  y: Tensor,
  mean: Tensor,
  rstd: Tensor,
  eps = 1e-5,
): void {
  const fn = 'layerNormForward';
  const [n, c] = rowShape(fn, 'x', x);
  expectSize(fn, 'w', w, c, `(C=${c})`);
  expectSize(fn, 'b', b, c, `(C=${c})`);
  expectSize(fn, 'y', y, n * c, `(N=${n}, C=${c})`);
  expectSize(fn, 'mean', mean, n, `(N=${n})`);
  expectSize(fn, 'rstd', rstd, n, `(N=${n})`);
  if (n === 0 || c === 0) return;
  const { kernel, rowsPerGroup } = rowKernel(gpu, 'layernorm', 'forward', c, PER_LANE);
  gpu.dispatch(
    kernel,
    bindingSlots(BINDINGS, { x, w, b, y, mean, rstd }),
    new Uint32Array([n, c, f32bits(eps), 0]),
    grid1d(n, rowsPerGroup),
  );
}

/**
 * Accumulates LayerNorm's gradients (llm.c's layernorm_backward), with xhat = (x − mean)·rstd:
 *   dx += rstd·(w·dy − mean_C(w·dy) − xhat·mean_C(w·dy·xhat)),  dw += Σ_rows dy·xhat,  db += Σ_rows dy.
 * Four dispatches: dx per row; dw/db partial sums over chunks of rows; their sums into dw and
 * db (reduce.ts addColumnSums).
 * @param x (N, C), @param w (C), @param mean (N), @param rstd (N) as saved by {@link layerNormForward}
 * @param dy (N, C) upstream gradient
 * @param dx (N, C) +=, @param dw (C) +=, @param db (C) +=
 * @throws Error naming the tensor whose size does not match.
 */
export function layerNormBackward(
  gpu: Gpu,
  x: Tensor,
  w: Tensor,
  mean: Tensor,
  rstd: Tensor,
  dy: Tensor,
  dx: Tensor,
  dw: Tensor,
  db: Tensor,
): void {
  const fn = 'layerNormBackward';
  const [n, c] = rowShape(fn, 'x', x);
  expectSize(fn, 'w', w, c, `(C=${c})`);
  expectSize(fn, 'mean', mean, n, `(N=${n})`);
  expectSize(fn, 'rstd', rstd, n, `(N=${n})`);
  expectSize(fn, 'dy', dy, n * c, `(N=${n}, C=${c})`);
  expectSize(fn, 'dx', dx, n * c, `(N=${n}, C=${c})`);
  expectSize(fn, 'dw', dw, c, `(C=${c})`);
  expectSize(fn, 'db', db, c, `(C=${c})`);
  if (n === 0 || c === 0) return;
  const { kernel, rowsPerGroup } = rowKernel(gpu, 'layernorm', 'bwd_dx', c, PER_LANE);
  gpu.dispatch(
    kernel,
    bindingSlots(BINDINGS, { x, w, mean, rstd, dy, dx }),
    new Uint32Array([n, c, 0, 0]),
    grid1d(n, rowsPerGroup),
  );
  const chunks = Math.ceil(n / ROWS_PER_CHUNK);
  const partW = gpu.empty([chunks, c], 'f32', 'layerNorm.partials.w');
  const partB = gpu.empty([chunks, c], 'f32', 'layerNorm.partials.b');
  gpu.dispatch(
    { key: 'layernorm.bwd_partial', code: gpu.shaders.layernorm, entryPoint: 'bwd_partial' },
    bindingSlots(BINDINGS, { x, mean, rstd, dy, partW, partB }),
    new Uint32Array([n, c, 0, ROWS_PER_CHUNK]),
    grid1d(chunks * c, 256),
  );
  addColumnSums(gpu, partW, dw, chunks, c);
  addColumnSums(gpu, partB, db, chunks, c);
  // Safe at once: later users of the pooled buffers are encoded after these dispatches.
  partW.release();
  partB.release();
}
