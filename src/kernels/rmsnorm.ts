/**
 * RMSNorm over the last dimension (Zhang & Sennrich, arXiv 1910.07467), the norm of Mamba
 * (state-spaces/mamba `mamba_ssm/ops/triton/layer_norm.py`, rms_norm_ref) and of RWKV-style
 * hybrids. Laid out like layernorm.ts: the forward saves each row's reciprocal RMS so the
 * backward needs no second statistics pass.
 */
import { f32bits, type Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { grid1d } from './grid.ts';
import { addColumnSums, bindingSlots, expectSize, rowKernel, ROWS_PER_CHUNK, rowShape } from './reduce.ts';

/** Elements of a row each invocation handles, roughly, on GPUs (see rowLanes). */
const PER_LANE = 8;

/** The shader's binding numbers; params follow at BINDINGS.length. */
const BINDINGS = ['x', 'w', 'y', 'rstd', 'dy', 'dx', 'part'] as const;

/** rmsnorm.wgsl follows layernorm.wgsl's LANES/WG row contract, so reduce.ts sizes its lanes. */
function rmsRowKernel(gpu: Gpu, entry: string, c: number) {
  return rowKernel(gpu, 'rmsnorm', entry, c, PER_LANE);
}

/**
 * y = x·rstd·w per row, with rstd = 1/√(Σx²/C + eps).
 * @param x (N, C) — any shape whose last dimension is C; N is the product of the others
 * @param w (C) gain
 * @param y (N, C) output, @param rstd (N) output (saved for the backward)
 * @param eps added to the mean square (default 1e-5, Mamba's)
 * @throws Error naming the tensor whose size does not match.
 */
export function rmsNormForward(
  gpu: Gpu,
  x: Tensor,
  w: Tensor,
  y: Tensor,
  rstd: Tensor,
  eps = 1e-5,
): void {
  const fn = 'rmsNormForward';
  const [n, c] = rowShape(fn, 'x', x);
  expectSize(fn, 'w', w, c, `(C=${c})`);
  expectSize(fn, 'y', y, n * c, `(N=${n}, C=${c})`);
  expectSize(fn, 'rstd', rstd, n, `(N=${n})`);
  if (!(eps >= 0)) throw new Error(`${fn}: eps must be a non-negative number, got ${eps}`);
  if (n === 0 || c === 0) return;
  const { kernel, rowsPerGroup } = rmsRowKernel(gpu, 'forward', c);
  gpu.dispatch(
    kernel,
    bindingSlots(BINDINGS, { x, w, y, rstd }),
    new Uint32Array([n, c, f32bits(eps), 0]),
    grid1d(n, rowsPerGroup),
  );
}

/**
 * Accumulates RMSNorm's gradients, with xhat = x·rstd:
 *   dx += rstd·(w·dy − xhat·mean_C(w·dy·xhat)),  dw += Σ_rows dy·xhat.
 * Three dispatches: dx per row; dw partial sums over chunks of rows; their sum into dw
 * (reduce.ts addColumnSums).
 * @param x (N, C), @param w (C), @param rstd (N) as saved by {@link rmsNormForward}
 * @param dy (N, C) upstream gradient
 * @param dx (N, C) += (null: skipped), @param dw (C) += (null: skipped)
 * @throws Error naming the tensor whose size does not match.
 */
export function rmsNormBackward(
  gpu: Gpu,
  x: Tensor,
  w: Tensor,
  rstd: Tensor,
  dy: Tensor,
  dx: Tensor | null,
  dw: Tensor | null,
): void {
  const fn = 'rmsNormBackward';
  const [n, c] = rowShape(fn, 'x', x);
  expectSize(fn, 'w', w, c, `(C=${c})`);
  expectSize(fn, 'rstd', rstd, n, `(N=${n})`);
  expectSize(fn, 'dy', dy, n * c, `(N=${n}, C=${c})`);
  if (dx) expectSize(fn, 'dx', dx, n * c, `(N=${n}, C=${c})`);
  if (dw) expectSize(fn, 'dw', dw, c, `(C=${c})`);
  if (n === 0 || c === 0) return;
  if (dx) {
    const { kernel, rowsPerGroup } = rmsRowKernel(gpu, 'bwd_dx', c);
    gpu.dispatch(
      kernel,
      bindingSlots(BINDINGS, { x, w, rstd, dy, dx }),
      new Uint32Array([n, c, 0, 0]),
      grid1d(n, rowsPerGroup),
    );
  }
  if (!dw) return;
  const chunks = Math.ceil(n / ROWS_PER_CHUNK);
  const part = gpu.empty([chunks, c], 'f32', 'rmsNorm.partials');
  gpu.dispatch(
    { key: 'rmsnorm.bwd_partial', code: gpu.shaders.rmsnorm, entryPoint: 'bwd_partial' },
    bindingSlots(BINDINGS, { x, rstd, dy, part }),
    new Uint32Array([n, c, 0, ROWS_PER_CHUNK]),
    grid1d(chunks * c, 256),
  );
  addColumnSums(gpu, part, dw, chunks, c);
  // Safe at once: later users of the pooled buffer are encoded after these dispatches.
  part.release();
}
