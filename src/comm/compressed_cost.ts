/**
 * What a compressed collective sends and costs (docs/design.md#compressed-collectives-and-the-per-dimension-policy):
 * compressed.ts's calls as the uncompressed collectives they run on 4-byte words — allReduce = allToAll (direct) of p
 * compressed chunks + allGather (ring) of p compressed chunks; reduceScatter the first, allGather the second; allToAll
 * one allToAll; send one message — and PowerSGD's two ring allReduces of P and Q. Counts are exact against the trace
 * (cost.ts's conventions: n = the caller's buffer in elements; results in words sent by group rank r).
 */
import { collectiveTraffic, p2pTimeUs, predictUs, type Traffic } from './cost.ts';
import type { LinkSpec } from './network.ts';
import { type GradMatrix, powerSgdWords, type Scheme, schemeWords } from './compression.ts';

/** The calls compressed.ts makes compressed. */
export type CompressedCall = 'allReduce' | 'reduceScatter' | 'allGather' | 'allToAll' | 'send';

const sum = (a: Traffic, b: Traffic): Traffic => ({
  elements: a.elements + b.elements,
  messages: a.messages + b.messages,
});

/** One word-level call of a compressed call: the call and the words of its buffer. */
export type Phase = [CompressedCall, number];
/** The algorithm compressed.ts runs a word-level call with (its Communicator's defaults). */
export const phaseAlgorithm = (c: CompressedCall): 'direct' | 'ring' => (c === 'allToAll' ? 'direct' : 'ring');

/** The word-level calls one compressed call runs: [call, words of its buffer]; `none` runs itself. */
export function compressedPhases(call: CompressedCall, s: Scheme, n: number, p: number): Phase[] {
  if (s.kind === 'none') return [[call, n]];
  if (call === 'send') return [['send', schemeWords(s, n)]];
  if (p === 1) return [];
  const chunk = call === 'allReduce' ? Math.ceil(n / p) : n / p, w = p * schemeWords(s, chunk);
  if (call === 'allReduce') return [['allToAll', w], ['allGather', w]];
  return [[call === 'allGather' ? 'allGather' : 'allToAll', w]];
}

/**
 * Words and messages group rank r of p sends in one compressed call on n elements (scheme `s`
 * elementwise; `none`: the uncompressed call with its default algorithm).
 * @throws Error for powersgd ({@link powerSgdTraffic}) or an n that does not split over p where
 *   the call needs it.
 */
export function compressedTraffic(call: CompressedCall, s: Scheme, n: number, p: number, r: number): Traffic {
  if ((call === 'reduceScatter' || call === 'allGather' || call === 'allToAll') && n % p) {
    throw new Error(`compressedTraffic: ${call} of ${n} elements does not split over ${p} ranks`);
  }
  return compressedPhases(call, s, n, p).reduce<Traffic>((t, ph) => sum(t, phaseTraffic(ph, p, r)), {
    elements: 0,
    messages: 0,
  });
}

/** Words and messages group rank r of p sends in one word-level call (a send: one message of w words). */
export function phaseTraffic([c, w]: Phase, p: number, r: number): Traffic {
  return c === 'send' ? { elements: w, messages: 1 } : collectiveTraffic(c, phaseAlgorithm(c), w, p, r);
}

/**
 * Words and messages rank r of p sends in one PowerSGD allReduce of a packed gradient: a ring
 * allReduce of P (Σ rows·rank) and one of Q (Σ cols·rank) plus the `rest` uncompressed elements.
 */
export function powerSgdTraffic(
  matrices: readonly GradMatrix[],
  rank: number,
  rest: number,
  p: number,
  r: number,
): Traffic {
  const w = powerSgdWords(matrices, rank, rest);
  return sum(collectiveTraffic('allReduce', 'ring', w.p, p, r), collectiveTraffic('allReduce', 'ring', w.q, p, r));
}

/**
 * α-β time in µs of one compressed call on one link class: its word-level calls' times (cost.ts
 * predictUs, p2pTimeUs). Compression kernels are not charged: the simulated clock charges no
 * compute.
 */
export function compressedUs(call: CompressedCall, s: Scheme, n: number, p: number, l: LinkSpec): number {
  return compressedPhases(call, s, n, p).reduce(
    (t, [c, w]) => t + (c === 'send' ? p2pTimeUs(4 * w, l) : predictUs(c, phaseAlgorithm(c), 4 * w, p, l)),
    0,
  );
}
