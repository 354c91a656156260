/**
 * The number of core iterations r of a recurrent-depth model (docs/design.md#recurrent-depth; Geiping et al.,
 * arXiv 2502.05171 §3.3): drawn per training step from a log-normal Poisson distribution, fixed
 * at `evalIterations` for evaluation and sampling. The draw is a pure function of (seed, step), so
 * every data-parallel rank and pipeline stage draws the same r, and a resumed run the same
 * sequence, without any state to save.
 */
import { mixSeed, Random } from '../util/random.ts';

/** Salt of the depth draws, so they are unrelated to the batch sampler's and NEFTune's. */
const DEPTH_SALT = 0x52_44_45_50;

/** What the draw of r reads from a training config. */
export interface DepthSampling {
  /** Mean r̄ of the training distribution (iterations, ≥ 1). */
  recurIters: number;
  /** σ of the log-normal rate. */
  recurSigma: number;
  seed: number;
}

/**
 * A Poisson(λ) draw by Knuth's product of uniforms, in log space so a large λ cannot underflow
 * e^−λ. O(λ) uniforms: fine for the few dozen iterations a step runs.
 */
function poisson(rng: Random, lambda: number): number {
  let k = 0, logP = 0;
  for (;;) {
    logP += Math.log(1 - rng.uniform());
    if (logP < -lambda) return k;
    k++;
  }
}

/**
 * The core iterations r of training step `step`: τ ~ N(log(r̄ − 1) − σ²/2, σ), r = Poisson(e^τ) + 1,
 * the paper's distribution with its rate's mean r̄ − 1, so that E[r] = r̄ = `recurIters` (the paper
 * writes the rate's mean as r̄ and so has E[r] = r̄ + 1). r̄ = 1 gives r = 1 always. Capped at 4·r̄:
 * the tail beyond is about 0.1% of steps at σ = 0.5 and would only stretch a step's time.
 * @returns an integer in [1, 4·r̄].
 */
export function trainIterations(cfg: DepthSampling, step: number): number {
  const mean = cfg.recurIters - 1;
  if (mean <= 0) return 1;
  const rng = new Random(mixSeed(cfg.seed, DEPTH_SALT, step)), s = cfg.recurSigma;
  const tau = Math.log(mean) - (s * s) / 2 + s * rng.normal();
  return Math.min(poisson(rng, Math.exp(tau)) + 1, 4 * cfg.recurIters);
}

/** A model whose core runs a variable number of times per forward (recurrent-depth). */
export interface VariableDepth {
  /** r of the next forwards. */
  iterations: number;
  /** r of evaluation and sampling forwards (`--eval-iterations`). */
  readonly evalIterations: number;
}

/** `model` as a {@link VariableDepth}, or null for a model of fixed depth. */
export function variableDepth(model: unknown): VariableDepth | null {
  return model && typeof model === 'object' && 'evalIterations' in model ? model as VariableDepth : null;
}

/**
 * Runs `fn` (the forwards and backwards of training step `step`) with the model's r set to the
 * step's draw, then sets it back to the evaluation r, also when `fn` throws. For a model of fixed
 * depth it is `fn()`.
 * @returns what `fn` returns, and the r used (null for a fixed-depth model).
 */
export async function withTrainDepth<T>(
  model: unknown,
  cfg: DepthSampling,
  step: number,
  fn: () => Promise<T>,
): Promise<{ out: T; iterations: number | null }> {
  const depth = variableDepth(model);
  if (!depth) return { out: await fn(), iterations: null };
  const r = trainIterations(cfg, step);
  depth.iterations = r;
  try {
    return { out: await fn(), iterations: r };
  } finally {
    depth.iterations = depth.evalIterations;
  }
}

/** The metrics.jsonl field of a step: `{ iterations: r }` for recurrent-depth, else nothing. */
export function depthMetric(cfg: DepthSampling & { arch: string }, step: number): { iterations?: number } {
  return cfg.arch === 'recurrent-depth' ? { iterations: trainIterations(cfg, step) } : {};
}
