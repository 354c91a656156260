/**
 * Dynamic loss scaling for f16-mixed precision (Micikevicius et al., arXiv 1710.03740 §3.2;
 * torch.amp.GradScaler's policy). The backward starts from the loss gradient times S, so small
 * gradients survive the f16 casts of autocast.ts instead of flushing to zero; the update divides
 * by S again. When S pushes a value past f16's range the gradients hold ±inf/NaN: that step's
 * update is skipped and S halves. After `window` clean steps in a row S doubles, probing for the
 * largest scale that does not overflow (docs/design.md#mixed-precision).
 */
import { z } from 'zod';

/** The scaler's state, as a checkpoint carries it so a resumed run scales exactly as before. */
export const LossScaleStateSchema = z.strictObject({
  scale: z.number().positive(),
  /** Clean steps since the last change of scale. */
  clean: z.number().int().nonnegative(),
  /** Updates skipped so far (overflow). */
  skipped: z.number().int().nonnegative(),
});
export type LossScaleState = z.infer<typeof LossScaleStateSchema>;

/** Below this the scale cannot help any more: f16's smallest subnormal is 2⁻²⁴. */
export const MIN_LOSS_SCALE = 2 ** -24;

/** The scaler a config asks for: f16-mixed's, else null (f32 and bf16 have f32's range and need none). */
export function lossScalerFor(
  cfg: { precision: string; lossScale: number; lossScaleWindow: number },
): LossScaler | null {
  return cfg.precision === 'f16-mixed' ? new LossScaler(cfg.lossScale, cfg.lossScaleWindow) : null;
}

export class LossScaler {
  private s: LossScaleState;

  /**
   * @param init the first scale S (a power of two keeps the scaling exact; torch uses 2¹⁶).
   * @param window clean steps before S doubles (torch's growth_interval, 2000).
   * @throws Error for a scale that is not positive and finite or a window under 1.
   */
  constructor(init: number, readonly window: number, state?: LossScaleState) {
    if (!(init > 0 && Number.isFinite(init))) throw new Error(`loss scale must be positive and finite, got ${init}`);
    if (!Number.isInteger(window) || window < 1) {
      throw new Error(`loss scale window must be an integer ≥ 1, got ${window}`);
    }
    this.s = state ? LossScaleStateSchema.parse(state) : { scale: init, clean: 0, skipped: 0 };
  }

  /** The scale S the next backward multiplies the loss gradient by. */
  get scale(): number {
    return this.s.scale;
  }

  /** Updates skipped so far. */
  get skipped(): number {
    return this.s.skipped;
  }

  /**
   * Continues from a checkpoint's state.
   * @throws ZodError for a state of the wrong shape.
   */
  load(state: LossScaleState): void {
    this.s = LossScaleStateSchema.parse(state);
  }

  /** A copy of the state for a checkpoint. */
  state(): LossScaleState {
    return { ...this.s };
  }

  /**
   * Records one step's outcome: finite gradients count a clean step (S doubles after `window` of
   * them); non-finite ones halve S and count a skipped update. Returns whether the update applies.
   * @throws Error when S would fall below {@link MIN_LOSS_SCALE}: the gradients are non-finite at
   *   every scale, so the run has diverged rather than overflowed.
   */
  update(finite: boolean): boolean {
    const s = this.s;
    if (finite) {
      s.clean++;
      if (s.clean >= this.window) {
        s.scale *= 2;
        s.clean = 0;
      }
      return true;
    }
    s.scale /= 2;
    s.clean = 0;
    s.skipped++;
    if (s.scale < MIN_LOSS_SCALE) {
      throw new Error(
        `the loss scale fell below 2^-24 after ${s.skipped} skipped steps: the gradients are non-finite at every scale (the run diverged); lower --lr`,
      );
    }
    return false;
  }
}
