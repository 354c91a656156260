/**
 * Fused softmax + cross-entropy with an ignore mask (targets < 0 are ignored, like PyTorch's
 * ignore_index), after llm.c's fused_classifier: the forward keeps only each row's
 * log-sum-exp, never the (N, V) probabilities, and the backward recomputes softmax from it.
 * The loss stays on the GPU ([mean, count] tensor) so a step needs no read-back.
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

/**
 * lse[n] = log Σ_v exp(logits[n, v]) (max-shifted, so logits of any magnitude are safe) and
 * loss = [Σ_{targets[n] ≥ 0} (lse[n] − logits[n, targets[n]]) / count, count] (natural log, nats).
 * With every row ignored the loss is [0, 0]. A target ≥ V cannot be reported from the GPU:
 * it makes the loss NaN.
 * @param logits (N, V) — any shape whose last dimension is V
 * @param targets (N) i32 class ids; < 0 marks a row ignored
 * @param lse (N) output, saved for the backward
 * @param loss (2) output: [mean loss over non-ignored rows, count of non-ignored rows]
 * @throws Error naming the tensor whose size or dtype does not match.
 */
export function crossEntropyForward(
  gpu: Gpu,
  logits: Tensor,
  targets: Tensor,
  lse: Tensor,
  loss: Tensor,
): void {
  const fn = 'crossEntropyForward';
  const [n, v] = checkCommon(fn, logits, targets, lse, loss);
  const params = new Uint32Array([n, v, 0, NAN_BITS]);
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
 * targets[n] ≥ 0; ignored rows, and every row when count = 0, are left unchanged. This is the
 * gradient of gradScale · (mean loss) from {@link crossEntropyForward}, whose outputs it reads.
 * @param logits (N, V), @param targets (N) i32, @param lse (N) and @param loss (2) from the forward
 *   (count = loss[1] is read on the GPU, so no read-back is needed)
 * @param dlogits (N, V) +=
 * @param gradScale multiplies the gradient, e.g. 1/steps for gradient accumulation (default 1)
 * @throws Error naming the tensor whose size or dtype does not match.
 */
export function crossEntropyBackward(
  gpu: Gpu,
  logits: Tensor,
  targets: Tensor,
  lse: Tensor,
  loss: Tensor,
  dlogits: Tensor,
  gradScale = 1,
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
    new Uint32Array([n, v, f32bits(gradScale), NAN_BITS]),
    rowsGrid(n, v, 64),
  );
}
