/**
 * AdamW over a ParamStore's flat buffers with global-norm gradient clipping, entirely on
 * the GPU: the grad norm and clip scale stay in a small tensor that the update reads, so
 * the step needs no readback (torch.nn.utils.clip_grad_norm_ + torch.optim.AdamW).
 */
import type { Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { adamwUpdate, gradNorm, packAdamHyper } from '../kernels/adamw.ts';
import type { ParamStore } from '../nn/params.ts';

export interface AdamWOptions {
  beta1: number;
  beta2: number;
  eps: number;
  weightDecay: number;
  /** Global-norm clip threshold; 0 disables clipping. */
  gradClip: number;
}

/**
 * The clip scale min(1, clip / (‖g‖ + 1e-6)) in f32 arithmetic, as kernels/adamw.ts `gradNorm`
 * computes it on the GPU (torch.nn.utils.clip_grad_norm_), for trainers that reduce the global
 * norm across ranks on the host. `clip` 0 disables clipping (scale 1).
 */
export function clipScale(norm: number, clip: number): number {
  return clip > 0 ? Math.min(1, Math.fround(clip / Math.fround(norm + 1e-6))) : 1;
}

export class AdamW {
  /** [‖g‖₂, clip scale] of the last step, on the GPU. */
  readonly norm: Tensor;
  private readonly hyper: Tensor;

  constructor(private readonly gpu: Gpu, private readonly store: ParamStore, private readonly o: AdamWOptions) {
    this.norm = gpu.zeros([2], 'f32', 'grad_norm');
    this.hyper = gpu.zeros([8], 'f32', 'adam_hyper');
  }

  /** Encodes one update at learning rate `lr`; `step` counts from 1 (bias correction). */
  step(lr: number, step: number): void {
    const { gpu, store, o } = this;
    gpu.write(this.hyper, packAdamHyper({ lr, beta1: o.beta1, beta2: o.beta2, eps: o.eps, step }));
    gradNorm(gpu, store.grads, this.norm, o.gradClip);
    for (const p of store.params) {
      adamwUpdate(gpu, p.value, p.grad, p.m, p.v, this.hyper, this.norm, p.decay ? o.weightDecay : 0);
    }
  }
}
