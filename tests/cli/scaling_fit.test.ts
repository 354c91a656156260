/**
 * The scaling-law fits of `npm run experiment -- scaling` (src/experiments/scaling_fit.ts): on
 * points drawn from a known law they recover its exponents; the compute-optimal split of a
 * budget matches the closed form; too few points is a clear error.
 */
import { ok, throws } from 'node:assert/strict';
import {
  bootstrap,
  computeOptimal,
  fitParamsLaw,
  fitShapeLaw,
  predictLoss,
  type ScalingPoint,
} from '../../src/experiments/scaling_fit.ts';

/** A grid of widths × depths × token counts with loss from a known law, plus a little seeded noise. */
function grid(law: (p: Omit<ScalingPoint, 'loss'>) => number, noise = 0): ScalingPoint[] {
  const out: ScalingPoint[] = [];
  let s = 12345;
  for (const width of [32, 64, 96, 128]) {
    for (const depth of [1, 2, 4]) {
      for (const tokens of [1e5, 2e5, 4e5, 8e5]) {
        const n = 12 * depth * width * width;
        s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
        out.push({ n, width, depth, tokens, loss: law({ n, width, depth, tokens }) + noise * (s / 2 ** 32 - 0.5) });
      }
    }
  }
  return out;
}

const near = (x: number, want: number, tol: number, what: string) =>
  ok(Math.abs(x - want) <= tol, `${what}: ${x} vs ${want} (±${tol})`);

Deno.test('scaling fit: L(N, D) recovers α, β and E from points of a known law', () => {
  const pts = grid((p) => 1.5 + 400 * p.n ** -0.4 + 900 * p.tokens ** -0.5, 0.002);
  const fit = fitParamsLaw(pts);
  near(fit.params.alpha, 0.4, 0.05, 'α');
  near(fit.params.beta, 0.5, 0.05, 'β');
  near(fit.params.E, 1.5, 0.05, 'E');
  ok(fit.rms < 0.002, `rms ${fit.rms}`);
  const err = bootstrap(fitParamsLaw, pts, 20);
  ok(err.alpha > 0 && err.alpha < 0.05, `bootstrap σ(α) ${err.alpha}`);
});

Deno.test('scaling fit: L(w, d, D) recovers the width, depth and token exponents', () => {
  const pts = grid((p) => 1.2 + 3 * p.width ** -0.6 + 0.4 * p.depth ** -0.3 + 600 * p.tokens ** -0.45);
  const fit = fitShapeLaw(pts);
  near(fit.params.a, 0.6, 0.05, 'a');
  near(fit.params.b, 0.3, 0.05, 'b');
  near(fit.params.gamma, 0.45, 0.05, 'γ');
});

Deno.test('scaling fit: the compute-optimal split follows N_opt ∝ C^(β/(α+β)), and too few points is refused', () => {
  const pts = grid((p) => 1.5 + 400 * p.n ** -0.4 + 900 * p.tokens ** -0.5);
  const fit = fitParamsLaw(pts);
  const a = computeOptimal(fit, pts, 1e15), b = computeOptimal(fit, pts, 1e16);
  near(Math.log10(b.n / a.n), fit.params.beta / (fit.params.alpha + fit.params.beta), 1e-9, 'N_opt slope');
  near(a.n * a.tokens * 6, 1e15, 1e3, 'C = 6ND');
  // The split is the minimum: moving N either way along C = 6ND raises the predicted loss.
  const at = (n: number) => predictLoss(fit, pts, n, 1e15 / (6 * n));
  ok(at(a.n * 1.2) > at(a.n) && at(a.n / 1.2) > at(a.n), 'a minimum along C = 6ND');
  throws(() => fitParamsLaw(pts.slice(0, 4)), /4 points cannot determine 5 parameters/);
});
