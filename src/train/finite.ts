/**
 * What a run checks before it saves a checkpoint, so a diverged run never overwrites a good one.
 *
 * A state is good when (1) every parameter and AdamW moment is finite — counted on the GPU by
 * kernels/reduce.ts `countNonFinite`, one pass per buffer into one counter, one read — and (2)
 * the loss AND the gradient norm computed FROM it (the next step's, before its update) are
 * finite. (2) matters because the loss a step reports was computed before its update: an
 * update can leave finite but absurd weights (1e28 after `--lr 1e30`) whose next forward
 * overflows, or weights whose forward still gives a finite loss (2.7e10 after `--lr 1e6`) but
 * whose backward overflows, so that any update from them, at any LR, is NaN. A state passing
 * both is resumable: with finite gradients (clipped) the next update is bounded by the LR.
 * No threshold on the size of weights or loss is applied: there is no principled one.
 * Runtime-neutral (rank workers use it too).
 */
import type { Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { countNonFinite } from '../kernels/reduce.ts';

/**
 * Number of ±Inf / NaN elements over `tensors` (f32), counted on the GPU with one readback.
 * @throws Error from countNonFinite for a tensor that is not f32.
 */
export async function nonFiniteCount(gpu: Gpu, tensors: Iterable<Tensor>): Promise<number> {
  const count = gpu.zeros([1], 'u32', 'nonfinite.count');
  try {
    for (const t of tensors) countNonFinite(gpu, t, count);
    return (await gpu.read(count))[0];
  } finally {
    count.release();
  }
}

/** `37632` → `37 632` (groups of three split by spaces, as the error messages print counts). */
export function fmtCount(n: number): string {
  return Math.round(n).toLocaleString('en-US').replaceAll(',', ' ');
}

/** Why a state after the update of step `step` is not saved: non-finite values, else null. */
export function nonFiniteReason(count: number): string | null {
  return count > 0 ? `${fmtCount(count)} non-finite values in parameters/optimizer state after the update` : null;
}

/** The loss and gradient norm computed from a state: the next step's, before its update. */
export interface Probe {
  loss: number;
  gradNorm: number;
  /** f16-mixed: the step overflowed at its loss scale and was skipped (its norm is not finite, by design). */
  skipped?: boolean;
}

/** Why a state is not saved when the next step computed from it gives `p`, else null. */
export function probeReason(p: Probe): string | null {
  // An f16 overflow at the current loss scale is not divergence: the scaler halves and goes on.
  if (Number.isFinite(p.loss) && (Number.isFinite(p.gradNorm) || p.skipped)) return null;
  return `parameters and optimizer state are finite but the next step computed from them gives loss ${p.loss}, gradient norm ${p.gradNorm} (the update diverged)`;
}

/**
 * A run stopped because its state diverged. `step` is the 0-based step whose update (or loss)
 * went wrong; `lastGood` the steps done at the newest checkpoint known good (the one kept on
 * disk), null when there is none; `dir` where it lies.
 */
export class DivergenceError extends Error {
  constructor(
    readonly step: number,
    readonly what: string,
    readonly lastGood: number | null,
    readonly dir: string | undefined,
  ) {
    const where = dir ? ` in ${dir}` : '';
    const kept = lastGood !== null
      ? `the last good checkpoint (step ${lastGood})${where} is kept`
      : `no checkpoint was saved${where} (none was good)`;
    super(`step ${step}: ${what}; ${kept}; lower --lr (or check the data)`);
    this.name = 'DivergenceError';
  }
}

/**
 * Checks a single-rank state before it is saved: (1) on the GPU, then (2) `probe()`, the loss and
 * gradient norm computed from it. Returns why it must not be saved, or null when it is good.
 */
export async function checkState(
  gpu: Gpu,
  state: Record<string, Tensor>,
  probe: () => Promise<Probe>,
): Promise<string | null> {
  return nonFiniteReason(await nonFiniteCount(gpu, Object.values(state))) ??
    probeReason(await probe());
}
