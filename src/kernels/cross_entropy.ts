/**
 * Fused softmax + cross-entropy with an ignore mask (targets < 0 are ignored, like PyTorch's
 * ignore_index), after llm.c's fused_classifier: the forward keeps only each row's
 * log-sum-exp, never the (N, V) probabilities, and the backward recomputes softmax from it.
 * The loss stays on the GPU ([mean, count] tensor) so a step needs no read-back.
 * `cols` < V marks the columns ≥ cols as a padded vocabulary (--pad-vocab): they are left out
 * of the softmax and get no gradient, so the loss is the unpadded model's.
 */
import { f32bits, type Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { grid1d } from './grid.ts';
import { expectDtype, expectSize, rowKernel, rowReduceShader, rowsGrid, subgroupRows } from './reduce.ts';

/** Logits each invocation handles, roughly, on GPUs (see rowLanes). */
const PER_LANE = 8;
const NAN_BITS = 0x7fc00000;

function shapeOf(fn: string, logits: Tensor): [number, number] {
  if (logits.shape.length < 1) {
    throw new Error(`${fn}: logits must have at least one dimension, got [${logits.shape}]`);
  }
  const v = logits.shape[logits.shape.length - 1];
  return [v === 0 ? 0 : logits.size / v, v];
}

function checkCommon(
  fn: string,
  logits: Tensor,
  targets: Tensor,
  lse: Tensor,
  loss: Tensor,
): [number, number] {
  const [n, v] = shapeOf(fn, logits);
  if (v === 0) {
    throw new Error(`${fn}: logits need at least one class, got shape [${logits.shape}]`);
  }
  expectSize(fn, 'targets', targets, n, `(N=${n})`);
  expectDtype(fn, 'targets', targets, 'i32');
  expectSize(fn, 'lse', lse, n, `(N=${n})`);
  expectSize(fn, 'loss', loss, 2, '(2) [mean loss, count]');
  return [n, v];
}

/** The uniform: [N, V, gradScale bits, NaN bits, cols, 0, 0, 0]. @throws Error unless 1 ≤ cols ≤ V. */
function paramsOf(fn: string, n: number, v: number, scaleBits: number, cols: number): Uint32Array {
  if (!Number.isInteger(cols) || cols < 1 || cols > v) {
    throw new Error(`${fn}: real classes cols must be an integer in [1, V=${v}], got ${cols}`);
  }
  return new Uint32Array([n, v, scaleBits, NAN_BITS, cols, 0, 0, 0]);
}

/**
 * lse[n] = log Σ_v exp(logits[n, v]) (max-shifted, so logits of any magnitude are safe) and
 * loss = [Σ_{targets[n] ≥ 0} (lse[n] − logits[n, targets[n]]) / count, count] (natural log, nats).
 * With every row ignored the loss is [0, 0]. A target ≥ cols cannot be reported from the GPU:
 * it makes the loss NaN. Sums and maxima run over columns [0, cols) only.
 * @param logits (N, V) — any shape whose last dimension is V
 * @param targets (N) i32 class ids; < 0 marks a row ignored
 * @param lse (N) output, saved for the backward
 * @param loss (2) output: [mean loss over non-ignored rows, count of non-ignored rows]
 * @param cols real classes (default V): columns ≥ cols are padding, outside the softmax
 * @throws Error naming the tensor whose size or dtype does not match, or cols outside [1, V].
 */
export function crossEntropyForward(
  gpu: Gpu,
  logits: Tensor,
  targets: Tensor,
  lse: Tensor,
  loss: Tensor,
  cols?: number,
): void {
  const fn = 'crossEntropyForward';
  const [n, v] = checkCommon(fn, logits, targets, lse, loss);
  const params = paramsOf(fn, n, v, 0, cols ?? v);
  if (n > 0) {
    const { kernel, rowsPerGroup } = rowKernel(gpu, 'softmax_xent', 'fwd_lse', v, PER_LANE);
    gpu.dispatch(
      kernel,
      [logits, undefined, lse, undefined, undefined],
      params,
      grid1d(n, rowsPerGroup),
    );
  }
  // Runs for N = 0 too, so the loss is [0, 0] rather than stale. Its one workgroup is a row of
  // 256 lanes, so it takes the subgroup reductions too where the device has them.
  const { code, suffix } = rowReduceShader(gpu, 'softmax_xent', subgroupRows(gpu));
  gpu.dispatch(
    { key: `softmax_xent.fwd_loss${suffix}`, code, entryPoint: 'fwd_loss' },
    [logits, targets, lse, loss, undefined],
    params,
    [1],
  );
}

/**
 * dlogits[n, v] += (softmax(logits[n])[v] − [v = targets[n]]) · gradScale / count on rows with
 * targets[n] ≥ 0 and v < cols; ignored rows, padded columns, and every row when count = 0,
 * are left unchanged. This is the
 * gradient of gradScale · (mean loss) from {@link crossEntropyForward}, whose outputs it reads.
 * @param logits (N, V), @param targets (N) i32, @param lse (N) and @param loss (2) from the forward
 *   (count = loss[1] is read on the GPU, so no read-back is needed)
 * @param dlogits (N, V) +=
 * @param gradScale multiplies the gradient, e.g. 1/steps for gradient accumulation (default 1)
 * @param cols real classes, as given to the forward (default V)
 * @throws Error naming the tensor whose size or dtype does not match, or cols outside [1, V].
 */
export function crossEntropyBackward(
  gpu: Gpu,
  logits: Tensor,
  targets: Tensor,
  lse: Tensor,
  loss: Tensor,
  dlogits: Tensor,
  gradScale = 1,
  cols?: number,
): void {
  const fn = 'crossEntropyBackward';
  const [n, v] = checkCommon(fn, logits, targets, lse, loss);
  expectSize(fn, 'dlogits', dlogits, n * v, `(N=${n}, V=${v})`);
  if (!Number.isFinite(gradScale)) {
    throw new Error(`${fn}: gradScale must be finite, got ${gradScale}`);
  }
  gpu.dispatch(
    { key: 'softmax_xent.bwd', code: gpu.shaders.softmax_xent, entryPoint: 'bwd' },
    [logits, targets, lse, loss, dlogits],
    paramsOf(fn, n, v, f32bits(gradScale), cols ?? v),
    rowsGrid(n, v, 64),
  );
}
