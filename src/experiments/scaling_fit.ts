/**
 * Scaling-law fits for the `scaling` experiment (docs/design.md#a-scaling-law-sweep): loss against parameters
 * and tokens, L(N, D) = E + A·N^−α + B·D^−β (Hoffmann et al. 2022, "Chinchilla", approach 3),
 * and against width, depth and tokens, L(w, d, D) = E + A·w^−a + B·d^−b + G·D^−γ, fitted by
 * Levenberg–Marquardt (ml-levenberg-marquardt) from several starts, with bootstrap errors, and
 * the compute-optimal split of a FLOP budget C = 6·N·D that a fit prescribes.
 */
import { levenbergMarquardt } from 'ml-levenberg-marquardt';
import { Random } from '../util/random.ts';

/** One trained model's end point: parameters, width, depth, tokens seen, and its val loss (nats). */
export interface ScalingPoint {
  n: number;
  width: number;
  depth: number;
  tokens: number;
  loss: number;
}

/** A fitted law: the exponents and coefficients by name, and its RMS residual (nats). */
export interface LawFit {
  params: Record<string, number>;
  rms: number;
}

/** A law: parameter names, the loss it predicts for a point, its starting values and lower bounds. */
interface Law {
  names: string[];
  predict(p: number[], x: ScalingPoint): number;
  starts(points: ScalingPoint[]): number[][];
  min: number[];
}

const geoMean = (xs: number[]) => Math.exp(xs.reduce((s, x) => s + Math.log(x), 0) / xs.length);

/** Scales of N, width, depth and D (geometric means), so every coefficient is of order one. */
function scales(points: ScalingPoint[]) {
  return {
    n: geoMean(points.map((p) => p.n)),
    w: geoMean(points.map((p) => p.width)),
    d: geoMean(points.map((p) => p.depth)),
    t: geoMean(points.map((p) => p.tokens)),
  };
}

function paramsLaw(points: ScalingPoint[]): Law {
  const s = scales(points);
  const lo = Math.min(...points.map((p) => p.loss));
  return {
    names: ['E', 'A', 'alpha', 'B', 'beta'],
    predict: ([e, a, al, b, be], x) => e + a * (x.n / s.n) ** -al + b * (x.tokens / s.t) ** -be,
    starts: () => [0.25, 0.5, 1].flatMap((al) => [0.25, 0.5, 1].map((be) => [lo / 2, lo / 4, al, lo / 4, be])),
    min: [0, 0, 0, 0, 0],
  };
}

function shapeLaw(points: ScalingPoint[]): Law {
  const s = scales(points);
  const lo = Math.min(...points.map((p) => p.loss));
  return {
    names: ['E', 'A', 'a', 'B', 'b', 'G', 'gamma'],
    predict: ([e, a, ea, b, eb, g, eg], x) =>
      e + a * (x.width / s.w) ** -ea + b * (x.depth / s.d) ** -eb + g * (x.tokens / s.t) ** -eg,
    starts: () => [0.25, 0.75].flatMap((x) => [0.25, 0.75].map((y) => [lo / 2, lo / 6, x, lo / 6, y, lo / 6, 0.5])),
    min: [0, 0, 0, 0, 0, 0, 0],
  };
}

function fitLaw(law: Law, points: ScalingPoint[]): LawFit {
  if (points.length < law.names.length) {
    throw new Error(`scaling fit: ${points.length} points cannot determine ${law.names.length} parameters`);
  }
  const data = { x: points.map((_, i) => i), y: points.map((p) => p.loss) };
  let best: number[] | null = null;
  let bestErr = Infinity;
  for (const start of law.starts(points)) {
    const r = levenbergMarquardt(data, (p) => (i) => law.predict(p, points[i]), {
      initialValues: start,
      minValues: law.min,
      maxIterations: 300,
      damping: 1e-2,
      gradientDifference: 1e-6,
      centralDifference: true,
      errorTolerance: 1e-10,
    });
    if (r.parameterError < bestErr && r.parameterValues.every(Number.isFinite)) {
      [best, bestErr] = [r.parameterValues, r.parameterError];
    }
  }
  if (!best) throw new Error('scaling fit: no start converged to finite parameters');
  const p = best;
  const rms = Math.sqrt(points.reduce((s, x) => s + (law.predict(p, x) - x.loss) ** 2, 0) / points.length);
  return { params: Object.fromEntries(law.names.map((n, i) => [n, p[i]])), rms };
}

/** L(N, D) = E + A·(N/N̄)^−α + B·(D/D̄)^−β over `points` (N̄, D̄ their geometric means). */
export function fitParamsLaw(points: ScalingPoint[]): LawFit {
  return fitLaw(paramsLaw(points), points);
}

/** L(w, d, D) = E + A·(w/w̄)^−a + B·(d/d̄)^−b + G·(D/D̄)^−γ over `points`. */
export function fitShapeLaw(points: ScalingPoint[]): LawFit {
  return fitLaw(shapeLaw(points), points);
}

/**
 * Bootstrap standard deviations of each parameter of `fit` over `rounds` resamples of
 * `points` with replacement (seeded), so an exponent is reported with its fit error.
 */
export function bootstrap(
  fit: (points: ScalingPoint[]) => LawFit,
  points: ScalingPoint[],
  rounds = 50,
  seed = 7,
): Record<string, number> {
  const rng = new Random(seed);
  const draws: Record<string, number>[] = [];
  for (let r = 0; r < rounds; r++) {
    const sample = points.map(() => points[rng.int(points.length)]);
    try {
      draws.push(fit(sample).params);
    } catch {
      // A resample with too few distinct points cannot be fitted; it is left out.
    }
  }
  if (draws.length < 2) throw new Error('scaling fit: fewer than two bootstrap resamples could be fitted');
  const out: Record<string, number> = {};
  for (const k of Object.keys(draws[0])) {
    const xs = draws.map((d) => d[k]);
    const m = xs.reduce((s, x) => s + x, 0) / xs.length;
    out[k] = Math.sqrt(xs.reduce((s, x) => s + (x - m) ** 2, 0) / (xs.length - 1));
  }
  return out;
}

/** The loss the law `fit` of {@link fitParamsLaw} over `points` predicts at N parameters and D tokens. */
export function predictLoss(fit: LawFit, points: ScalingPoint[], n: number, tokens: number): number {
  const s = scales(points);
  const { E, A, alpha, B, beta } = fit.params;
  return E + A * (n / s.n) ** -alpha + B * (tokens / s.t) ** -beta;
}

/**
 * The compute-optimal split of `flops` (C = 6·N·D) under the law `fit` of {@link fitParamsLaw}
 * over `points`: N_opt ∝ C^(β/(α+β)) (minimising L(N, C/(6N)) in closed form).
 * @returns parameters, tokens, tokens per parameter, and the exponent β/(α+β).
 */
export function computeOptimal(
  fit: LawFit,
  points: ScalingPoint[],
  flops: number,
): { n: number; tokens: number; tokensPerParam: number; exponent: number } {
  const s = scales(points);
  const { A, alpha, B, beta } = fit.params;
  const k = flops / (6 * s.n * s.t); // D/D̄ = k / (N/N̄)
  const nRel = ((alpha * A) / (beta * B)) ** (1 / (alpha + beta)) * k ** (beta / (alpha + beta));
  const n = nRel * s.n;
  const tokens = flops / (6 * n);
  return { n, tokens, tokensPerParam: tokens / n, exponent: beta / (alpha + beta) };
}
