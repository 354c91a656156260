/**
 * AdamW (Loshchilov & Hutter, arXiv 1711.05101) as torch.optim.AdamW / nanoGPT, with global
 * gradient-norm clipping as torch.nn.utils.clip_grad_norm_ (clip scale applied inside the
 * update, so the gradients themselves are never rewritten).
 *
 * A step is: {@link gradNorm} once over the flat gradient buffer, then {@link adamwUpdate} per
 * parameter slice. Per-step hyper-parameters (lr, bias corrections) live in a small storage
 * tensor written once per step ({@link packAdamHyper}), so every uniform buffer and bind group is
 * the same from one step to the next.
 */
import { f32bits, type Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { grid1d } from './grid.ts';

/** Invocations per workgroup; must match WG in shaders/adamw.wgsl. */
const WG = 256;
/** Most workgroups of the norm's first pass; each invocation writes one partial sum. */
const MAX_PARTIAL_GROUPS = 256;
/** Elements each invocation of the first pass should at least see, so small arrays use few groups. */
const MIN_PER_THREAD = 16;

/** The per-step hyper-parameters of {@link adamwUpdate}. */
export interface AdamHyper {
  /** Learning rate. */
  lr: number;
  beta1: number;
  beta2: number;
  eps: number;
  /** Step count t ≥ 1 (the first update is t = 1), for the bias corrections. */
  step: number;
}

/**
 * Packs the hyper-parameters into the 8-f32 layout the update kernel reads:
 * [lr, beta1, beta2, eps, 1−beta1^t, 1−beta2^t, 0, 0]. The bias corrections are computed in f64.
 * @throws Error when step is not an integer ≥ 1 or a beta is outside [0, 1).
 */
export function packAdamHyper(h: AdamHyper): Float32Array {
  if (!Number.isInteger(h.step) || h.step < 1) {
    throw new Error(`packAdamHyper: step must be an integer ≥ 1, got ${h.step}`);
  }
  for (const k of ['beta1', 'beta2'] as const) {
    if (!(h[k] >= 0 && h[k] < 1)) {
      throw new Error(`packAdamHyper: ${k} must be in [0, 1), got ${h[k]}`);
    }
  }
  return new Float32Array([
    h.lr,
    h.beta1,
    h.beta2,
    h.eps,
    1 - h.beta1 ** h.step,
    1 - h.beta2 ** h.step,
    0,
    0,
  ]);
}

function checkF32(what: string, name: string, t: Tensor, min = 0): void {
  if (t.dtype !== 'f32') throw new Error(`${what}: ${name} must be f32, got ${t.dtype}`);
  if (t.size < min) {
    throw new Error(`${what}: ${name} needs at least ${min} elements, got [${t.shape}]`);
  }
}

/**
 * Global L2 norm of the gradients and the clip scale, as torch.nn.utils.clip_grad_norm_.
 *
 * @param grads the flat gradient buffer as one tensor (any shape; up to tens of millions of f32).
 * @param norm (2) out: [‖g‖₂, min(1, maxNorm / (‖g‖₂ + 1e-6))]; maxNorm ≤ 0 means no clipping (scale 1).
 * Two dispatches: per-invocation partial sums of squares (at most 256·256, into pooled scratch
 * released after encoding), then a one-workgroup reduce. Sums are f32.
 * @throws Error when a tensor is not f32, norm has fewer than 2 elements, or both share a buffer.
 */
export function gradNorm(gpu: Gpu, grads: Tensor, norm: Tensor, maxNorm: number): void {
  const what = 'gradNorm';
  checkF32(what, 'grads', grads);
  checkF32(what, 'norm', norm, 2);
  if (grads.buffer === norm.buffer) {
    throw new Error(
      `${what}: grads and norm share one GPUBuffer; WebGPU cannot bind it read-only and writable at once`,
    );
  }
  if (!Number.isFinite(maxNorm)) throw new Error(`${what}: maxNorm must be finite, got ${maxNorm}`);
  const n = grads.size;
  const groups = Math.max(1, Math.min(MAX_PARTIAL_GROUPS, Math.ceil(n / (WG * MIN_PER_THREAD))));
  const partials = gpu.empty([groups * WG], 'f32', 'gradNorm.partials');
  try {
    const code = gpu.shaders.adamw;
    gpu.dispatch(
      { key: 'adamw.norm_partial', code, entryPoint: 'norm_partial' },
      [grads, undefined, undefined, partials, undefined, undefined],
      new Uint32Array([n, 0, 0, 0]),
      [groups],
    );
    gpu.dispatch(
      { key: 'adamw.norm_final', code, entryPoint: 'norm_final' },
      [partials, undefined, undefined, norm, undefined, undefined],
      new Uint32Array([groups * WG, 0, f32bits(maxNorm), 0]),
      [1],
    );
  } finally {
    partials.release();
  }
}

/**
 * One AdamW step for one parameter slice, all tensors of equal size (hyper and norm excepted):
 *   g′ = g·norm[1];  m = β1 m + (1−β1) g′;  v = β2 v + (1−β2) g′²;
 *   p −= lr·( (m / (1−β1^t)) / (sqrt(v / (1−β2^t)) + eps) + weightDecay·p )
 * (decoupled weight decay from the old p, as torch.optim.AdamW).
 *
 * @param param parameter slice (read_write).
 * @param grad its gradient, a read-only slice of the flat gradient buffer.
 * @param m first-moment slice (read_write); param, m and v lie in three different buffers.
 * @param v second-moment slice (read_write).
 * @param hyper (8) from {@link packAdamHyper}, written once per step.
 * @param norm (2) from {@link gradNorm}.
 * @param weightDecay per parameter group (0 for biases and norms in nanoGPT).
 * @throws Error on a size mismatch, a non-f32 tensor, or a buffer shared with a writable operand.
 */
export function adamwUpdate(
  gpu: Gpu,
  param: Tensor,
  grad: Tensor,
  m: Tensor,
  v: Tensor,
  hyper: Tensor,
  norm: Tensor,
  weightDecay: number,
): void {
  const what = 'adamwUpdate';
  for (const [name, t] of [['param', param], ['grad', grad], ['m', m], ['v', v]] as const) {
    checkF32(what, name, t);
    if (t.size !== param.size) {
      throw new Error(
        `${what}: ${name} has shape [${t.shape}] (${t.size} elements), param has ${param.size}`,
      );
    }
  }
  checkF32(what, 'hyper', hyper, 8);
  checkF32(what, 'norm', norm, 2);
  if (!Number.isFinite(weightDecay)) {
    throw new Error(`${what}: weightDecay must be finite, got ${weightDecay}`);
  }
  const named: [string, Tensor][] = [['param', param], ['m', m], ['v', v], ['grad', grad], [
    'hyper',
    hyper,
  ], ['norm', norm]];
  for (let i = 0; i < 3; i++) {
    for (let j = 0; j < named.length; j++) {
      if (i !== j && named[i][1].buffer === named[j][1].buffer) {
        throw new Error(
          `${what}: ${named[i][0]} and ${named[j][0]} share one GPUBuffer; writable operands need buffers of their own`,
        );
      }
    }
  }
  const n = param.size;
  gpu.dispatch(
    { key: 'adamw.update', code: gpu.shaders.adamw, entryPoint: 'update' },
    [grad, hyper, norm, param, m, v],
    new Uint32Array([n, f32bits(weightDecay), 0, 0]),
    grid1d(n, WG),
  );
}

/**
 * One SGD step for one parameter slice (no momentum): p −= lr·(g·norm[1] + weightDecay·p), the
 * gradient clipped as {@link adamwUpdate} clips it and the decay decoupled from the old p. Linear
 * in p and g, which is what makes local SGD and DiLoCo with one inner step equal data parallelism.
 *
 * @param param parameter slice (read_write); `grad` its gradient (same size, another buffer).
 * @param hyper (8) from {@link packAdamHyper} (only lr is read); `norm` (2) from {@link gradNorm}.
 * @throws Error on a size mismatch, a non-f32 tensor, or param sharing a buffer with an operand.
 */
export function sgdUpdate(
  gpu: Gpu,
  param: Tensor,
  grad: Tensor,
  hyper: Tensor,
  norm: Tensor,
  weightDecay: number,
): void {
  const what = 'sgdUpdate';
  checkF32(what, 'param', param);
  checkF32(what, 'grad', grad);
  if (grad.size !== param.size) {
    throw new Error(`${what}: grad has shape [${grad.shape}] (${grad.size} elements), param has ${param.size}`);
  }
  checkF32(what, 'hyper', hyper, 8);
  checkF32(what, 'norm', norm, 2);
  if (!Number.isFinite(weightDecay)) throw new Error(`${what}: weightDecay must be finite, got ${weightDecay}`);
  for (const [name, t] of [['grad', grad], ['hyper', hyper], ['norm', norm]] as const) {
    if (t.buffer === param.buffer) {
      throw new Error(`${what}: param and ${name} share one GPUBuffer; the writable param needs a buffer of its own`);
    }
  }
  const n = param.size;
  gpu.dispatch(
    { key: 'adamw.sgd', code: gpu.shaders.adamw, entryPoint: 'sgd' },
    [grad, hyper, norm, param, undefined, undefined],
    new Uint32Array([n, f32bits(weightDecay), 0, 0]),
    grid1d(n, WG),
  );
}
