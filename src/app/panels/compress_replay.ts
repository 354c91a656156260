/**
 * The data of the compression lesson (learn_compress.ts): what one traced compressed allReduce
 * (src/comm/compressed.ts, docs/design.md#compressed-collectives-and-the-per-dimension-policy) did step by step — each
 * rank's input, what it sent decoded, the error-feedback residuals left behind, and the words its send spans carried —
 * and the error-feedback invariant checked on those measured values. The GPU run is compress_run.ts; this file has no
 * GPU or DOM, so tests/app runs it under Deno.
 */
import type { Span } from '../../comm/trace.ts';

/** The lesson's size: 2 ranks, a few dozen values, a handful of steps. */
export const LESSON = { p: 2, n: 24, steps: 5 } as const;

/**
 * Rank r's input at step t (n values): a fixed pattern plus a drift that grows with t, so the
 * same large values recur and the residual visibly carries what was dropped. Values are
 * multiples of 1/64, exact in f32, so the sums below are the inputs' own.
 */
export function lessonInput(r: number, t: number, n: number): Float32Array {
  return Float32Array.from({ length: n }, (_, i) => {
    const v = Math.sin(1.7 * i + 2.1 * r + 0.5) * (1 + (i % 3) / 2) + 0.25 * t * Math.cos(0.9 * i + r);
    return Math.round(64 * v) / 64;
  });
}

/** Words one rank put on the wire in one step, by phase (from its send spans). */
export interface StepWords {
  /** Phase 1: the allToAll of compressed chunks. */
  allToAll: number;
  /** Phase 2: the allGather of compressed reduced chunks. */
  allGather: number;
  total: number;
}

/** One step of the traced call, every array n long, indexed by rank where per rank. */
export interface CompressStep {
  /** Each rank's input x_r. */
  inputs: Float32Array[];
  /** Each rank's phase-1 message decoded from its words: D(C(x_r + e₁ before)); chunk j went to rank j. */
  sent: Float32Array[];
  /** Each rank's phase-1 residual e₁ after the step (chunk j at j·c). */
  residual: Float32Array[];
  /** The allReduce's result, the same on every rank: the decoded reduced chunks. */
  output: Float32Array;
  /** The phase-2 residual e₂ after the step: chunk j is rank j's (it reduced and sent that chunk). */
  reducedResidual: Float32Array;
  /** Words each rank sent this step, from the trace. */
  words: StepWords[];
}

/**
 * Words each of `p` ranks sent in `spans` (send spans of one step; 4 bytes a word), by phase.
 * @throws Error when a send belongs to neither phase: the call is not the two-phase allReduce.
 */
export function wordsByRank(spans: readonly Span[], p: number): StepWords[] {
  const out = Array.from({ length: p }, () => ({ allToAll: 0, allGather: 0, total: 0 }));
  for (const s of spans) {
    if (s.kind !== 'send') continue;
    if (s.op !== 'allToAll' && s.op !== 'allGather') {
      throw new Error(`rank ${s.rank} sent an ${s.op} message; a compressed allReduce sends allToAll and allGather only`);
    }
    out[s.rank][s.op] += s.bytes / 4;
    out[s.rank].total += s.bytes / 4;
  }
  return out;
}

/** Words an uncompressed allReduce of n values sends per rank on p ranks (ring, or both phases): 2(p−1)·⌈n/p⌉. */
export const rawWords = (n: number, p: number) => 2 * (p - 1) * Math.ceil(n / p);

/** The error-feedback sums through some step, over every value (f64). */
export interface Invariant {
  /** Per rank: Σ_steps sent, its residual e₁ now, and Σ_steps inputs; Σ sent + e₁ = Σ x. */
  ranks: { sent: number; residual: number; inputs: number; gap: number }[];
  /** The whole call: Σ_steps output + e₂ + Σ_r e₁ = Σ_steps Σ_r x. */
  delivered: number;
  residual: number;
  inputs: number;
  /** Largest |lhs − rhs| of any single value, over the ranks' and the call's identities. */
  gap: number;
}

const total = (xs: ArrayLike<number>) => Array.from(xs).reduce((a, v) => a + v, 0);

/**
 * The invariants of error feedback through the first `upto` steps, from the measured values:
 * per rank Σ sent + e₁ = Σ x (what the compressor dropped is still owed), and for the call
 * Σ outputs + e₂ + Σ_r e₁ = Σ inputs (nothing is lost, only delayed).
 * @throws Error when `upto` is outside 1 … steps.length.
 */
export function invariantAfter(steps: readonly CompressStep[], upto: number): Invariant {
  if (!Number.isInteger(upto) || upto < 1 || upto > steps.length) {
    throw new Error(`invariantAfter: step ${upto} is outside 1–${steps.length}`);
  }
  const done = steps.slice(0, upto), last = done[done.length - 1];
  const p = last.inputs.length, n = last.output.length;
  let gap = 0;
  const ranks = [...Array(p).keys()].map((r) => {
    const sent = new Float64Array(n), inputs = new Float64Array(n);
    for (const s of done) s.sent[r].forEach((v, i) => (sent[i] += v, inputs[i] += s.inputs[r][i]));
    const g = Math.max(0, ...sent.map((v, i) => Math.abs(v + last.residual[r][i] - inputs[i])));
    gap = Math.max(gap, g);
    return { sent: total(sent), residual: total(last.residual[r]), inputs: total(inputs), gap: g };
  });
  const lhs = new Float64Array(n), rhs = new Float64Array(n);
  for (const s of done) s.output.forEach((v, i) => (lhs[i] += v, rhs[i] += s.inputs.reduce((a, x) => a + x[i], 0)));
  const owed = Float64Array.from(last.reducedResidual, (v, i) => v + last.residual.reduce((a, e) => a + e[i], 0));
  lhs.forEach((v, i) => (gap = Math.max(gap, Math.abs(v + owed[i] - rhs[i]))));
  return { ranks, delivered: total(lhs), residual: total(owed), inputs: total(rhs), gap };
}
