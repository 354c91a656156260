/**
 * What one collective call costs: the exact elements and messages each rank sends in every
 * algorithm of algorithms.ts and halving_doubling.ts ({@link collectiveTraffic}), α-β cost
 * formulas of the collective algorithms (docs/design.md#the-network-model-the-simulated-clock-and-collective-costs;
 * Thakur, Rabenseifner & Gropp, "Optimization of Collective Communication Operations in MPICH", IJHPCA 2005) and the
 * bandwidth figures of nccl-tests (doc/PERFORMANCE.md): algbw = S / t, busbw = algbw × factor.
 *
 * Conventions: S = n = bytes of the caller's full buffer (allReduce/broadcast/reduce: the
 * vector; reduceScatter: its input; allGather: its output; allToAll: the buffer), as
 * nccl-tests' "size" column. The local reduction term γ is not modelled (the simulated clock
 * charges no time for it). Under the egress model of network.ts, messages a rank sends back to
 * back queue on its link, hence the (p−1)·n/β of the direct algorithms.
 */
import type { LinkSpec } from './network.ts';
import { chunkOffsets } from './algorithms.ts';
import { fold } from './halving_doubling.ts';
import type { Algorithm } from './call_options.ts';

/** Collectives with a size (barrier excluded). */
export type SizedCollective = 'allReduce' | 'reduceScatter' | 'allGather' | 'broadcast' | 'reduce' | 'allToAll';

/** nccl-tests' busbw factor for a world of p. */
export function busBwFactor(coll: SizedCollective, p: number): number {
  if (coll === 'allReduce') return (2 * (p - 1)) / p;
  if (coll === 'reduceScatter' || coll === 'allGather' || coll === 'allToAll') return (p - 1) / p;
  return 1;
}

/** algbw and busbw in GB/s for S bytes moved in `ms` milliseconds. */
export function bandwidths(
  coll: SizedCollective,
  bytes: number,
  ms: number,
  p: number,
): { algbw: number; busbw: number } {
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

/** A collective as the element counts name it (the same set as {@link SizedCollective}). */
export type Collective = SizedCollective;

/** What one rank puts on the wire in one call. */
export interface Traffic {
  elements: number;
  messages: number;
}

const ZERO: Traffic = { elements: 0, messages: 0 };
const add = (a: Traffic, b: Traffic): Traffic => ({
  elements: a.elements + b.elements,
  messages: a.messages + b.messages,
});
const one = (elements: number): Traffic => ({ elements, messages: 1 });

/** Elements recursive halving sends from new rank nr over super-chunk offsets `so` (halving_doubling.ts `halving`). */
function halvingSent(nr: number, pof2: number, so: number[]): Traffic {
  let t = ZERO, lo = 0, hi = pof2;
  for (let mask = pof2 >> 1; mask >= 1; mask >>= 1) {
    const mid = lo + mask;
    const [keepLo, keepHi, sendLo, sendHi] = nr & mask ? [mid, hi, lo, mid] : [lo, mid, mid, hi];
    t = add(t, one(so[sendHi] - so[sendLo]));
    [lo, hi] = [keepLo, keepHi];
  }
  return t;
}

/** Elements recursive doubling sends from new rank nr (halving_doubling.ts `doubling`). */
function doublingSent(nr: number, pof2: number, so: number[]): Traffic {
  let t = ZERO, lo = nr;
  for (let mask = 1; mask < pof2; mask <<= 1) {
    t = add(t, one(so[lo + mask] - so[lo]));
    lo = Math.min(lo, lo ^ mask);
  }
  return t;
}

/** Binomial tree from `root`: what rank r sends in a broadcast (algorithms.ts `binomialBroadcast`). */
function binomialBcastSent(n: number, p: number, r: number, root: number): Traffic {
  const rr = (((r - root) % p) + p) % p;
  let mask = 1, t = ZERO;
  while (mask < p && !(rr & mask)) mask <<= 1;
  for (mask >>= 1; mask > 0; mask >>= 1) if (rr + mask < p) t = add(t, one(n));
  return t;
}

/**
 * Exact elements and messages group rank `r` of `p` sends in one call of `coll` with
 * `algorithm` on a buffer of `n` elements (see the module doc), mirroring
 * src/comm/algorithms.ts and halving_doubling.ts step by step (chunks from `chunkOffsets`,
 * MPICH's non-power-of-two fold). Ring allReduce on rank r sends 2n − chunk(r) − chunk(r+1).
 * @throws Error for an algorithm the collective does not accept or bad sizes.
 */
export function collectiveTraffic(
  coll: Collective,
  algorithm: Algorithm,
  n: number,
  p: number,
  r: number,
  root = 0,
): Traffic {
  if (!Number.isInteger(n) || n < 0 || !Number.isInteger(p) || p < 1 || !Number.isInteger(r) || r < 0 || r >= p) {
    throw new Error(`collectiveTraffic: need integers n ≥ 0, p ≥ 1, 0 ≤ r < p; got n ${n}, p ${p}, r ${r}`);
  }
  if (p === 1) return ZERO;
  const offs = chunkOffsets(n, p), size = (c: number) => offs[(c % p) + 1] - offs[c % p];
  const f = fold(p, r), folded = r < 2 * f.rem;
  const superOffs = () => [...Array(f.pof2).keys()].map((nr) => offs[f.chunks(nr)[0]]).concat(offs[p]);
  const bad = () => new Error(`collectiveTraffic: ${coll} has no algorithm '${algorithm}'`);
  switch (coll) {
    case 'allReduce':
      if (algorithm === 'ring') return { elements: 2 * n - size(r) - size(r + 1), messages: 2 * (p - 1) };
      if (algorithm === 'direct') return { elements: (p - 1) * n, messages: p - 1 };
      if (algorithm === 'binomial') return add(r === root ? ZERO : one(n), binomialBcastSent(n, p, r, root));
      if (algorithm === 'recursive-doubling' || algorithm === 'rabenseifner') {
        if (folded && f.newRank < 0) return one(n); // hands its vector to r+1 and waits
        const so = chunkOffsets(n, f.pof2);
        const core = algorithm === 'rabenseifner'
          ? add(halvingSent(f.newRank, f.pof2, so), doublingSent(f.newRank, f.pof2, so))
          : { elements: Math.log2(f.pof2) * n, messages: Math.log2(f.pof2) };
        return folded ? add(core, one(n)) : core;
      }
      throw bad();
    case 'reduceScatter':
      if (algorithm === 'ring' || algorithm === 'direct') return { elements: n - size(r), messages: p - 1 };
      if (algorithm === 'rabenseifner') {
        if (folded && f.newRank < 0) return one(n);
        const core = halvingSent(f.newRank, f.pof2, superOffs());
        return folded ? add(core, one(size(r - 1))) : core;
      }
      throw bad();
    case 'allGather':
      if (algorithm === 'ring') return { elements: n - size(r + 1), messages: p - 1 };
      if (algorithm === 'direct') return { elements: (p - 1) * size(r), messages: p - 1 };
      if (algorithm === 'recursive-doubling') {
        if (folded && f.newRank < 0) return one(size(r));
        const core = doublingSent(f.newRank, f.pof2, superOffs());
        return folded ? add(core, one(n)) : core;
      }
      throw bad();
    case 'broadcast':
      if (algorithm === 'binomial') return binomialBcastSent(n, p, r, root);
      if (algorithm === 'direct') return r === root ? { elements: (p - 1) * n, messages: p - 1 } : ZERO;
      throw bad();
    case 'reduce':
      if (algorithm === 'binomial' || algorithm === 'direct') return r === root ? ZERO : one(n);
      throw bad();
    case 'allToAll':
      if (algorithm === 'direct') return { elements: n - size(r), messages: p - 1 };
      throw bad();
  }
  throw new Error(`collectiveTraffic: unknown collective '${coll}'`);
}

/** One point-to-point message of `bytes` in µs: α + bytes/β. */
export const p2pTimeUs = (
  bytes: number,
  link: LinkSpec,
) => (bytes === 0 ? 0 : link.alphaUs + bytes / (link.betaGBps * 1e3));
