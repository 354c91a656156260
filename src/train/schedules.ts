/** Learning-rate schedules as pure functions of the step. */

/**
 * Linear warmup from 0 to `lr` over `warmup` steps, then cosine decay to `minLr` at
 * `decaySteps`, constant after (nanoGPT get_lr; Loshchilov & Hutter arXiv 1608.03983).
 * Step counts from 0; warmup reaches lr·(step+1)/(warmup+1) as nanoGPT does.
 */
export function cosineWithWarmup(step: number, o: { lr: number; minLr: number; warmup: number; decaySteps: number }): number {
  if (step < o.warmup) return (o.lr * (step + 1)) / (o.warmup + 1);
  if (step > o.decaySteps) return o.minLr;
  const ratio = o.decaySteps === o.warmup ? 1 : (step - o.warmup) / (o.decaySteps - o.warmup);
  const coeff = 0.5 * (1 + Math.cos(Math.PI * ratio));
  return o.minLr + coeff * (o.lr - o.minLr);
}
