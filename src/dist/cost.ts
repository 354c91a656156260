/**
 * α-β cost formulas of the collective algorithms (DESIGN.md §6; Thakur, Rabenseifner & Gropp,
 * "Optimization of Collective Communication Operations in MPICH", IJHPCA 2005) and the
 * bandwidth figures of nccl-tests (doc/PERFORMANCE.md): algbw = S / t, busbw = algbw × factor.
 *
 * Conventions: S = n = bytes of the caller's full buffer (allReduce/broadcast/reduce: the
 * vector; reduceScatter: its input; allGather: its output; allToAll: the buffer), as
 * nccl-tests' "size" column. The local reduction term γ is not modelled (the simulated clock
 * charges no time for it). Under the egress model of network.ts, messages a rank sends back to
 * back queue on its link, hence the (p−1)·n/β of the direct algorithms.
 */
import type { LinkSpec } from './network.ts';

/** Collectives with a size (barrier excluded). */
export type SizedCollective = 'allReduce' | 'reduceScatter' | 'allGather' | 'broadcast' | 'reduce' | 'allToAll';

/** nccl-tests' busbw factor for a world of p. */
export function busBwFactor(coll: SizedCollective, p: number): number {
  if (coll === 'allReduce') return (2 * (p - 1)) / p;
  if (coll === 'reduceScatter' || coll === 'allGather' || coll === 'allToAll') return (p - 1) / p;
  return 1;
}

/** algbw and busbw in GB/s for S bytes moved in `ms` milliseconds. */
export function bandwidths(coll: SizedCollective, bytes: number, ms: number, p: number): { algbw: number; busbw: number } {
  const algbw = bytes / (ms * 1e6);
  return { algbw, busbw: algbw * busBwFactor(coll, p) };
}

const lg = (p: number) => Math.ceil(Math.log2(p));

/**
 * Predicted time in µs of `coll` with `algorithm` on p ranks over one link class `l`, for S =
 * `bytes`. Power-of-two p gives the textbook formulas; other p add MPICH's fold (one extra
 * exchange of the whole vector before and after) for recursive doubling / halving.
 * @throws Error for an algorithm the collective does not have.
 */
export function predictUs(coll: SizedCollective, algorithm: string, bytes: number, p: number, l: LinkSpec): number {
  if (p === 1) return 0;
  const a = l.alphaUs, b = 1 / (l.betaGBps * 1e3); // µs per byte
  const n = bytes, pof2 = 2 ** Math.floor(Math.log2(p)), folded = pof2 !== p;
  const fold = folded ? 2 * (a + n * b) : 0;
  const key = `${coll}/${algorithm}`;
  switch (key) {
    case 'allReduce/ring':
      return 2 * (p - 1) * a + ((2 * (p - 1)) / p) * n * b;
    case 'allReduce/recursive-doubling':
      return Math.log2(pof2) * (a + n * b) + fold;
    case 'allReduce/rabenseifner':
      return 2 * Math.log2(pof2) * a + ((2 * (pof2 - 1)) / pof2) * n * b + fold;
    case 'allReduce/binomial':
      return 2 * lg(p) * (a + n * b);
    case 'allReduce/direct':
      return a + (p - 1) * n * b;
    case 'reduceScatter/ring':
    case 'allGather/ring':
      return (p - 1) * a + ((p - 1) / p) * n * b;
    case 'reduceScatter/rabenseifner':
    case 'allGather/recursive-doubling':
      return Math.log2(pof2) * a + ((pof2 - 1) / pof2) * n * b + (folded ? 2 * a + n * b : 0);
    case 'reduceScatter/direct':
    case 'allGather/direct':
      return a + ((p - 1) / p) * n * b;
    case 'broadcast/binomial':
    case 'reduce/binomial':
      return lg(p) * (a + n * b);
    case 'broadcast/direct':
      return a + (p - 1) * n * b;
    case 'reduce/direct':
      return a + n * b;
    case 'allToAll/direct':
      return (p - 1) * (a + (n / p) * b);
  }
  throw new Error(`predictUs: no formula for ${key}`);
}
