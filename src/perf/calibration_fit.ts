/**
 * The fits a measured device profile is made of (docs/design.md#a-performance-model-that-chooses-the-plan): the
 * GEMM rate curve R·x/(x + half) over matmul timings, and a link's α and β over collective timings by message size.
 * Pure functions, so `npm run plan -- --calibrate` and `--device bench.json` fit the same way and tests can check
 * the fits on made-up points.
 */
import { predictUs, type SizedCollective } from '../comm/cost.ts';

/** One timed GEMM: M×N×K and its achieved GFLOP/s. */
export interface GemmPoint {
  m: number;
  n: number;
  k: number;
  gflops: number;
}

/**
 * The saturated rate R (GFLOP/s) and half-dimension minimising Σ(gflops − R·x/(x+half))² over `rows`, x the
 * smallest of M, N, K: for each half on a geometric grid 0, 4, 5, … 4096 the least-squares R, the best kept.
 * @throws Error when `rows` is empty.
 */
export function fitGemm(rows: GemmPoint[]): { rGflops: number; halfDim: number } {
  if (!rows.length) throw new Error('fitGemm: no matmul timings to fit');
  let best = { half: 0, R: 0, err: Infinity };
  for (let half = 0; half <= 4096; half = half ? half * 1.25 : 4) {
    const f = rows.map((r) => Math.min(r.m, r.n, r.k) / (Math.min(r.m, r.n, r.k) + half));
    const R = rows.reduce((a, r, i) => a + r.gflops * f[i], 0) / f.reduce((a, x) => a + x * x, 0);
    const err = rows.reduce((a, r, i) => a + (r.gflops - R * f[i]) ** 2, 0);
    if (err < best.err) best = { half, R, err };
  }
  return { rGflops: best.R, halfDim: best.half };
}

/** One timed collective: its size S in bytes and the median µs per call. */
export interface CommPoint {
  bytes: number;
  us: number;
}

/**
 * The link (α µs, β GB/s) whose α-β prediction (src/comm/cost.ts predictUs, the formula predictStep prices calls
 * with) best fits `points` of `coll` by `algorithm` over `p` ranks: predictUs is a·α + b/β in the two unknowns, so
 * a least-squares fit in (α, 1/β), each clamped to a positive value (α ≥ 0.01 µs, β ≤ 10⁶ GB/s) so that a
 * noisy sweep still yields a usable link.
 * @throws Error with fewer than two distinct sizes.
 */
export function fitAlphaBeta(
  coll: SizedCollective,
  algorithm: string,
  p: number,
  points: CommPoint[],
): { alphaUs: number; betaGBps: number } {
  if (new Set(points.map((x) => x.bytes)).size < 2) {
    throw new Error(`fitAlphaBeta: need at least two message sizes, got ${points.length} point(s)`);
  }
  const a = points.map((x) => predictUs(coll, algorithm, x.bytes, p, { alphaUs: 1, betaGBps: Infinity }));
  const b = points.map((x) => predictUs(coll, algorithm, x.bytes, p, { alphaUs: 0, betaGBps: 1 }));
  const y = points.map((x) => x.us);
  const dot = (u: number[], v: number[]) => u.reduce((s, ui, i) => s + ui * v[i], 0);
  const [aa, ab, bb, ay, by] = [dot(a, a), dot(a, b), dot(b, b), dot(a, y), dot(b, y)];
  const det = aa * bb - ab * ab;
  let alpha = (ay * bb - by * ab) / det, inv = (aa * by - ab * ay) / det; // inv = 1/β in (GB/s)⁻¹
  if (!(alpha > 0.01)) {
    alpha = 0.01;
    inv = (by - alpha * ab) / bb;
  }
  if (!(inv > 1e-6)) inv = 1e-6;
  return { alphaUs: alpha, betaGBps: 1 / inv };
}
