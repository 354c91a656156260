/**
 * Checks a model's tape gradients against central differences of its GPU loss, tensor by
 * tensor. Each tensor is probed along its tape gradient g (the largest slope one f32 difference
 * resolves, so a wrong scale shows) and along `dirs` seeded random unit directions u inside it
 * (so an error orthogonal to g shows too): the difference must match ⟨g, u⟩.
 *
 * The difference is Richardson's (4·D(ε/2) − D(ε)) / 3 of central differences
 * D(h) = (L(θ+hu) − L(θ−hu)) / 2h, which cancels their O(ε²) curvature error, so the step can
 * stay large against rounding. What is left is the f32 rounding of the losses: with NOISE a
 * bound on the error of L(θ+hu) − L(θ−hu) (losses ≈ 2.6 read back in f32: an ulp is 2.4e-7,
 * and the forward's own rounding moves with the weights; 1e-6 is about twice the largest error
 * the architectures show), D(h) is off by ≤ NOISE/2h and the extrapolation by ≤ 1.5·NOISE/ε.
 * RTOL = 2% covers the f32 accumulation of the backward. ε moves the loss by about 2e-3 along
 * the slope, capped at 1e-2.
 */
import { dot, rng } from './assert.ts';

const NOISE = 1e-6;
const RTOL = 0.02;

/** A standard normal draw (Box–Muller) from a uniform generator. */
function gaussian(r: () => number): number {
  return Math.sqrt(-2 * Math.log(1 - r())) * Math.cos(2 * Math.PI * r());
}

export interface GradCheckOptions {
  /** Random directions per tensor besides the gradient's own (default 2). */
  dirs?: number;
  seed?: number;
}

/**
 * Every disagreement, as lines ([] when all agree), and how many tensors have |g| > 1e-3 (for a
 * non-vacuity check). `lossAt(v)` evaluates the loss at flat parameters v, or NaN when the
 * evaluation is not comparable to the base point (an MoE routing flip: a jump, not a slope);
 * the step is then shrunk, up to 4 times.
 */
export async function gradientMismatches(
  params: readonly { name: string; offset: number; size: number }[],
  grads: ArrayLike<number>,
  base: Float32Array,
  lossAt: (v: Float32Array) => Promise<number>,
  { dirs = 2, seed = 17 }: GradCheckOptions = {},
): Promise<{ bad: string[]; strong: number }> {
  const bad: string[] = [], r = rng(seed);
  let strong = 0;
  for (const p of params) {
    const g = Float32Array.from({ length: p.size }, (_, i) => grads[p.offset + i]);
    if (g.every((x) => x === 0)) {
      bad.push(`${p.name}: no gradient at all`);
      continue;
    }
    if (Math.hypot(...g) > 1e-3) strong++;
    const random = Array.from({ length: dirs }, () => Float32Array.from({ length: p.size }, () => gaussian(r)));
    for (const [k, u] of [g.slice(), ...random].entries()) {
      const what = `${p.name} along ${k ? `random direction ${k}` : 'its gradient'}`;
      const norm = Math.hypot(...u);
      for (let i = 0; i < p.size; i++) u[i] /= norm;
      const slope = dot(g, u);
      const at = (h: number) => {
        const v = base.slice();
        for (let i = 0; i < p.size; i++) v[p.offset + i] += h * u[i];
        return lossAt(v);
      };
      const central = async (h: number) => ((await at(h)) - (await at(-h))) / (2 * h);
      let eps = Math.min(1e-2, 2e-3 / Math.abs(slope)), fd = NaN;
      for (let tries = 0; tries < 4 && Number.isNaN(fd); tries++, eps /= 4) {
        const [whole, half] = [await central(eps), await central(eps / 2)];
        fd = (4 * half - whole) / 3;
        if (!Number.isNaN(fd) && !(Math.abs(fd - slope) <= (1.5 * NOISE) / eps + RTOL * Math.abs(slope))) {
          bad.push(`${what}: tape ${slope.toExponential(3)} vs difference ${fd.toExponential(3)} (ε ${eps})`);
        }
      }
      if (Number.isNaN(fd)) bad.push(`${what}: the routing flips at every step tried`);
    }
  }
  return { bad, strong };
}
