/**
 * Recursive halving and doubling (MPICH src/mpi/coll/*): reduce-scatter by recursive halving,
 * all-gather and allreduce by recursive doubling, and Rabenseifner's allreduce (halving, then
 * doubling). Non-power-of-two p uses MPICH's fold: with pof2 = largest power of two ≤ p and
 * rem = p − pof2, each even rank r < 2·rem hands its data to r+1 and sits out; the remaining
 * pof2 ranks run the power-of-two algorithm under "new ranks" (r < 2·rem → r/2, else r − rem);
 * results are handed back at the end. The fold's renamed ranks set these apart from the ring,
 * direct, tree and pairwise algorithms of algorithms.ts, which defines the {@link Link} they
 * run over and the conventions (`offs`: p+1 chunk offsets; `work` is mutated in place);
 * cost.ts replays the fold to count their traffic.
 */
import { chunkOffsets, combine, type Link, type NumArray, type ReduceOp } from './algorithms.ts';

/** MPICH's non-power-of-two fold (see the module doc). */
export interface Fold {
  pof2: number;
  rem: number;
  /** This rank's new rank, or −1 when it sits out. */
  newRank: number;
  /** Group-local rank of a new rank. */
  real(nr: number): number;
  /** Original chunk range [first, last) that new rank nr stands for. */
  chunks(nr: number): [number, number];
}

export function fold(p: number, r: number): Fold {
  let pof2 = 1;
  while (pof2 * 2 <= p) pof2 *= 2;
  const rem = p - pof2;
  const newRank = r < 2 * rem ? (r % 2 === 0 ? -1 : r >> 1) : r - rem;
  return {
    pof2,
    rem,
    newRank,
    real: (nr) => (nr < rem ? nr * 2 + 1 : nr + rem),
    chunks: (nr) => (nr < rem ? [2 * nr, 2 * nr + 2] : [nr + rem, nr + rem + 1]),
  };
}

/** Fold in: even r < 2·rem sends all of `work` to r+1, which combines it. */
async function foldIn(l: Link, f: Fold, work: NumArray, op: ReduceOp) {
  if (l.r >= 2 * f.rem) return;
  if (f.newRank < 0) l.send(l.r + 1, work);
  else await l.recvInto(l.r - 1, (x) => combine(work, x, op));
}

/** Fold out: odd r < 2·rem sends the finished `work` back to r−1. */
async function foldOut(l: Link, f: Fold, work: NumArray) {
  if (l.r >= 2 * f.rem) return;
  if (f.newRank < 0) await l.recvInto(l.r + 1, (x) => work.set(x));
  else l.send(l.r - 1, work);
}

/**
 * Recursive halving among the pof2 new ranks over chunks `soffs` (pof2+1 offsets): afterwards
 * new rank nr holds the reduced chunk nr. (MPICH reduce_scatter / allreduce Rabenseifner.)
 */
async function halving(l: Link, f: Fold, work: NumArray, soffs: number[], op: ReduceOp) {
  const nr = f.newRank;
  let lo = 0, hi = f.pof2;
  for (let mask = f.pof2 >> 1; mask >= 1; mask >>= 1) {
    const mid = lo + mask;
    const [keepLo, keepHi, sendLo, sendHi] = nr & mask ? [mid, hi, lo, mid] : [lo, mid, mid, hi];
    const peer = f.real(nr ^ mask);
    l.send(peer, work.subarray(soffs[sendLo], soffs[sendHi]));
    await l.recvInto(peer, (x) => combine(work.subarray(soffs[keepLo], soffs[keepHi]), x, op));
    lo = keepLo;
    hi = keepHi;
  }
}

/** Recursive doubling all-gather among the pof2 new ranks; new rank nr starts with chunk nr. */
async function doubling(l: Link, f: Fold, work: NumArray, soffs: number[]) {
  const nr = f.newRank;
  let lo = nr;
  for (let mask = 1; mask < f.pof2; mask <<= 1) {
    const peer = f.real(nr ^ mask);
    const plo = lo ^ mask;
    l.send(peer, work.subarray(soffs[lo], soffs[lo + mask]));
    await l.recvInto(peer, (x) => work.set(x, soffs[plo]));
    lo = Math.min(lo, plo);
  }
}

/** Super-chunk offsets: new rank nr's chunk covers the original chunks it stands for. */
function superOffsets(f: Fold, offs: number[]): number[] {
  const s: number[] = [];
  for (let nr = 0; nr < f.pof2; nr++) s.push(offs[f.chunks(nr)[0]]);
  s.push(offs[offs.length - 1]);
  return s;
}

/** Recursive-halving reduce-scatter (any p, via the fold). Result chunk r in place. */
export async function halvingReduceScatter(l: Link, work: NumArray, offs: number[], op: ReduceOp) {
  const f = fold(l.p, l.r);
  await foldIn(l, f, work, op);
  if (f.newRank >= 0) await halving(l, f, work, superOffsets(f, offs), op);
  if (l.r >= 2 * f.rem) return;
  if (f.newRank < 0) await l.recvInto(l.r + 1, (x) => work.set(x, offs[l.r]));
  else l.send(l.r - 1, work.subarray(offs[l.r - 1], offs[l.r]));
}

/** Recursive-doubling all-gather (any p, via the fold). Chunk r of work is this rank's. */
export async function doublingAllGather(l: Link, work: NumArray, offs: number[]) {
  const f = fold(l.p, l.r);
  if (l.r < 2 * f.rem) {
    if (f.newRank < 0) l.send(l.r + 1, work.subarray(offs[l.r], offs[l.r + 1]));
    else await l.recvInto(l.r - 1, (x) => work.set(x, offs[l.r - 1]));
  }
  if (f.newRank >= 0) await doubling(l, f, work, superOffsets(f, offs));
  await foldOut(l, f, work);
}

/** Recursive-doubling allreduce: lg pof2 exchanges of the whole vector (plus the fold). */
export async function doublingAllReduce(l: Link, work: NumArray, op: ReduceOp) {
  const f = fold(l.p, l.r);
  await foldIn(l, f, work, op);
  if (f.newRank >= 0) {
    for (let mask = 1; mask < f.pof2; mask <<= 1) {
      const peer = f.real(f.newRank ^ mask);
      l.send(peer, work);
      await l.recvInto(peer, (x) => combine(work, x, op));
    }
  }
  await foldOut(l, f, work);
}

/** Rabenseifner allreduce: fold, recursive halving reduce-scatter, recursive doubling all-gather, unfold. */
export async function rabenseifnerAllReduce(l: Link, work: NumArray, op: ReduceOp) {
  const f = fold(l.p, l.r);
  await foldIn(l, f, work, op);
  if (f.newRank >= 0) {
    const soffs = chunkOffsets(work.length, f.pof2);
    await halving(l, f, work, soffs, op);
    await doubling(l, f, work, soffs);
  }
  await foldOut(l, f, work);
}
