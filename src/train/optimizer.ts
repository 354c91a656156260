/**
 * AdamW over a ParamStore's flat buffers with global-norm gradient clipping, entirely on
 * the GPU: the grad norm and clip scale stay in a small tensor that the update reads, so
 * the step needs no readback (torch.nn.utils.clip_grad_norm_ + torch.optim.AdamW).
 */
import type { Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { adamwUpdate, gradNorm, packAdamHyper, sgdUpdate } from '../kernels/adamw.ts';
import type { ParamStore } from '../nn/params.ts';

export interface AdamWOptions {
  beta1: number;
  beta2: number;
  eps: number;
  weightDecay: number;
  /** Global-norm clip threshold; 0 disables clipping. */
  gradClip: number;
  /** `sgd`: the same clip and decay with a plain SGD step (kernels/adamw.ts sgdUpdate; moments untouched). Default adamw. */
  optimizer?: 'adamw' | 'sgd';
}

/**
 * The clip scale min(1, clip / (‖g‖ + 1e-6)) in f32 arithmetic, as kernels/adamw.ts `gradNorm`
 * computes it on the GPU (torch.nn.utils.clip_grad_norm_), for trainers that reduce the global
 * norm across ranks on the host. `clip` 0 disables clipping (scale 1).
 */
export function clipScale(norm: number, clip: number): number {
  return clip > 0 ? Math.min(1, Math.fround(clip / Math.fround(norm + 1e-6))) : 1;
}

/** One tensor group AdamW updates in place: a parameter, or this rank's piece of one, with its moments. */
export interface AdamWSlot {
  value: Tensor;
  grad: Tensor;
  m: Tensor;
  v: Tensor;
  /** Weight decay applies (matrices, nanoGPT's rule). */
  decay: boolean;
}

/**
 * The one AdamW of the project (llm.c's single update function): every trainer's step ends in
 * {@link step} (one store whose gradient norm is computed on the GPU) or {@link stepSharded}
 * (the slots a rank owns, after the caller reduced the global norm across ranks).
 */
export class AdamW {
  /** [‖g‖₂, clip scale] of the last step, on the GPU. */
  readonly norm: Tensor;
  private readonly hyper: Tensor;

  constructor(private readonly gpu: Gpu, private readonly o: AdamWOptions) {
    this.norm = gpu.zeros([2], 'f32', 'grad_norm');
    this.hyper = gpu.zeros([8], 'f32', 'adam_hyper');
  }

  /** Encodes one update of every parameter of `store` at learning rate `lr`, clipped by the store's own ‖g‖; `step` counts from 1. */
  step(store: ParamStore, lr: number, step: number): void {
    gradNorm(this.gpu, store.grads, this.norm, this.o.gradClip);
    this.apply(store.params, lr, step);
  }

  /**
   * {@link step} for gradients that hold the loss scale S (train/loss_scale.ts): ‖g‖ is read back
   * and divided by S, the update divides the gradients by S along with the clip scale, and when
   * ‖g‖ is not finite (an f16 overflow) nothing is updated. One readback per call, as
   * torch.amp.GradScaler.step syncs on its inf check. Returns whether the update was applied.
   * A sum of squares past f32's range (‖g‖·S > 1.8e19) also counts as an overflow.
   */
  async stepScaled(store: ParamStore, lr: number, step: number, scale: number): Promise<boolean> {
    gradNorm(this.gpu, store.grads, this.norm, 0);
    const norm = Math.fround((await this.gpu.read(this.norm))[0] / scale);
    if (Number.isFinite(norm)) {
      this.stepSharded(store.params, lr, step, norm, 1 / scale);
      return true;
    }
    this.gpu.write(this.norm, new Float32Array([norm, 0])); // the record shows the overflow; nothing is updated
    return false;
  }

  /**
   * Encodes one update of `slots` with the global gradient norm `norm` (before clipping) that the
   * caller reduced over the ranks: clip scale min(1, clip/(‖g‖+1e-6)) as torch computes it.
   * `unscale` multiplies the gradients too: 1/S for gradients that hold a loss scale S
   * (loss_scale.ts; `norm` is then the unscaled one).
   */
  stepSharded(slots: readonly AdamWSlot[], lr: number, step: number, norm: number, unscale = 1): void {
    this.gpu.write(this.norm, new Float32Array([norm, clipScale(norm, this.o.gradClip) * unscale]));
    this.apply(slots, lr, step);
  }

  private apply(slots: readonly AdamWSlot[], lr: number, step: number): void {
    const { gpu, o } = this;
    gpu.write(this.hyper, packAdamHyper({ lr, beta1: o.beta1, beta2: o.beta2, eps: o.eps, step }));
    for (const p of slots) {
      const wd = p.decay ? o.weightDecay : 0;
      if (o.optimizer === 'sgd') sgdUpdate(gpu, p.value, p.grad, this.hyper, this.norm, wd);
      else adamwUpdate(gpu, p.value, p.grad, p.m, p.v, this.hyper, this.norm, wd);
    }
  }

  /** Frees the norm and hyperparameter tensors. */
  dispose(): void {
    this.norm.release();
    this.hyper.release();
  }
}
