/**
 * Collective algorithms over a {@link Link} (one call's view of its group: p ranks, own
 * group-local rank r, ordered send/recv to peers). They follow MPICH's intra-communicator
 * algorithms (src/mpi/coll/*): ring reduce-scatter / all-gather (as in NCCL's ring allreduce),
 * recursive doubling, Rabenseifner's recursive halving + doubling, binomial trees, pairwise
 * all-to-all and the dissemination barrier. Non-power-of-two p uses MPICH's fold: with
 * pof2 = largest power of two ≤ p and rem = p − pof2, each even rank r < 2·rem hands its data
 * to r+1 and sits out; the remaining pof2 ranks run the power-of-two algorithm under "new
 * ranks" (r < 2·rem → r/2, else r − rem); results are handed back at the end.
 *
 * Sends never block (a MessagePort queues; a full shared ring queues in its wire's outbox, §31),
 * so every exchange is "send, then receive" without deadlock.
 * Buffers are plain CPU typed arrays; `offs` are element offsets of per-rank chunks (length
 * p+1). Every function mutates `work` in place.
 */

export type ReduceOp = 'sum' | 'avg' | 'max' | 'min';
export type NumArray = Float32Array | Int32Array;

/** One call's messaging: peers are group-local ranks; send copies (the wire makes the one copy). */
export interface Link {
  readonly p: number;
  readonly r: number;
  send(peer: number, data: NumArray): void;
  recv(peer: number): Promise<NumArray>;
  /**
   * Receives the next message from `peer` and hands it to `use` at once; on the shared plane the
   * array is a view into the peer's ring, valid only during `use` (docs/design.md §31), so
   * reducing or copying inside `use` needs no intermediate copy.
   */
  recvInto(peer: number, use: (x: NumArray) => void): Promise<void>;
  recvAll(peers: number[]): Promise<NumArray[]>;
}

/** acc[i] = acc[i] ⊕ x[i]; `avg` sums (the caller divides once at the end). */
export function combine(acc: NumArray, x: NumArray, op: ReduceOp): void {
  if (acc.length !== x.length) throw new Error(`combine: ${acc.length} vs ${x.length} elements`);
  const n = acc.length;
  if (op === 'sum' || op === 'avg') { for (let i = 0; i < n; i++) acc[i] += x[i]; }
  else if (op === 'max') { for (let i = 0; i < n; i++) acc[i] = acc[i] >= x[i] ? acc[i] : x[i]; }
  else for (let i = 0; i < n; i++) acc[i] = acc[i] <= x[i] ? acc[i] : x[i];
}

/** Offsets splitting `count` elements into `parts` chunks, the first `count % parts` one larger. */
export function chunkOffsets(count: number, parts: number): number[] {
  const base = Math.floor(count / parts), extra = count % parts;
  const offs = [0];
  for (let i = 0; i < parts; i++) offs.push(offs[i] + base + (i < extra ? 1 : 0));
  return offs;
}

const mod = (a: number, p: number) => ((a % p) + p) % p;

/** MPICH's non-power-of-two fold (see module doc). */
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

/** Ring reduce-scatter (p−1 steps): afterwards work[offs[r]..offs[r+1]] is the reduced chunk r. */
export async function ringReduceScatter(l: Link, work: NumArray, offs: number[], op: ReduceOp) {
  const { p, r } = l;
  const right = mod(r + 1, p), left = mod(r - 1, p);
  const chunk = (c: number) => work.subarray(offs[mod(c, p)], offs[mod(c, p) + 1]);
  for (let s = 0; s < p - 1; s++) {
    l.send(right, chunk(r - s - 1));
    await l.recvInto(left, (x) => combine(chunk(r - s - 2), x, op));
  }
}

/** Ring all-gather (p−1 steps): chunk r of work is this rank's; afterwards all chunks are filled. */
export async function ringAllGather(l: Link, work: NumArray, offs: number[]) {
  const { p, r } = l;
  const right = mod(r + 1, p), left = mod(r - 1, p);
  for (let s = 0; s < p - 1; s++) {
    const c = mod(r - s, p), d = mod(r - s - 1, p);
    l.send(right, work.subarray(offs[c], offs[c + 1]));
    await l.recvInto(left, (x) => work.set(x, offs[d]));
  }
}

/** Direct reduce-scatter: chunk j goes straight to rank j, which combines in rank order. */
export async function directReduceScatter(l: Link, work: NumArray, offs: number[], op: ReduceOp) {
  const { p, r } = l;
  const peers = [...Array(p).keys()].filter((j) => j !== r);
  for (const j of peers) l.send(j, work.subarray(offs[j], offs[j + 1]));
  const got = await l.recvAll(peers);
  const mine = work.subarray(offs[r], offs[r + 1]);
  got.forEach((x) => combine(mine, x, op));
}

/** Direct all-gather: every rank sends its chunk to every other rank. */
export async function directAllGather(l: Link, work: NumArray, offs: number[]) {
  const { p, r } = l;
  const peers = [...Array(p).keys()].filter((j) => j !== r);
  for (const j of peers) l.send(j, work.subarray(offs[r], offs[r + 1]));
  (await l.recvAll(peers)).forEach((x, i) => work.set(x, offs[peers[i]]));
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

/** Direct allreduce: everyone sends its vector to everyone; each combines in rank order. */
export async function directAllReduce(l: Link, work: NumArray, op: ReduceOp) {
  const { p, r } = l;
  const peers = [...Array(p).keys()].filter((j) => j !== r);
  for (const j of peers) l.send(j, work);
  const got = await l.recvAll(peers);
  const parts = [...got.slice(0, r), work.slice(), ...got.slice(r)];
  work.set(parts[0]);
  for (let j = 1; j < p; j++) combine(work, parts[j], op);
}

/** Binomial-tree broadcast from `root` (MPICH bcast binomial): ⌈lg p⌉ rounds. */
export async function binomialBroadcast(l: Link, work: NumArray, root: number) {
  const { p, r } = l;
  const rr = mod(r - root, p);
  let mask = 1;
  while (mask < p) {
    if (rr & mask) {
      await l.recvInto(mod(r - mask, p), (x) => work.set(x));
      break;
    }
    mask <<= 1;
  }
  for (mask >>= 1; mask > 0; mask >>= 1) if (rr + mask < p) l.send(mod(r + mask, p), work);
}

/** Binomial-tree reduce to `root` (MPICH reduce binomial). `work` on root holds the result. */
export async function binomialReduce(l: Link, work: NumArray, root: number, op: ReduceOp) {
  const { p, r } = l;
  const rr = mod(r - root, p);
  for (let mask = 1; mask < p; mask <<= 1) {
    if ((rr & mask) === 0) {
      if ((rr | mask) < p) await l.recvInto(mod((rr | mask) + root, p), (x) => combine(work, x, op));
    } else {
      l.send(mod((rr & ~mask) + root, p), work);
      return;
    }
  }
}

/** Direct broadcast: root sends to every rank. */
export async function directBroadcast(l: Link, work: NumArray, root: number) {
  if (l.r === root) { for (let j = 0; j < l.p; j++) if (j !== root) l.send(j, work); }
  if (l.r !== root) await l.recvInto(root, (x) => work.set(x));
}

/** Direct reduce: every rank sends to root, which combines in rank order. */
export async function directReduce(l: Link, work: NumArray, root: number, op: ReduceOp) {
  if (l.r !== root) return l.send(root, work);
  const peers = [...Array(l.p).keys()].filter((j) => j !== root);
  (await l.recvAll(peers)).forEach((x) => combine(work, x, op));
}

/** Pairwise-exchange all-to-all (MPICH): step s sends chunk r+s to r+s, receives chunk r−s. */
export async function pairwiseAllToAll(l: Link, input: NumArray, out: NumArray, offs: number[]) {
  const { p, r } = l;
  out.set(input.subarray(offs[r], offs[r + 1]), offs[r]);
  for (let s = 1; s < p; s++) {
    const dst = mod(r + s, p), src = mod(r - s, p);
    l.send(dst, input.subarray(offs[dst], offs[dst + 1]));
    await l.recvInto(src, (x) => out.set(x, offs[src]));
  }
}

/** Dissemination barrier (MPICH): ⌈lg p⌉ rounds, round k signals r+2^k and waits for r−2^k. */
export async function disseminationBarrier(l: Link, token: NumArray) {
  for (let mask = 1; mask < l.p; mask <<= 1) {
    l.send(mod(l.r + mask, l.p), token);
    await l.recv(mod(l.r - mask, l.p));
  }
}

/** Direct barrier: everyone signals rank 0, which releases everyone. */
export async function directBarrier(l: Link, token: NumArray) {
  if (l.r !== 0) {
    l.send(0, token);
    await l.recv(0);
    return;
  }
  const peers = [...Array(l.p).keys()].slice(1);
  await l.recvAll(peers);
  for (const j of peers) l.send(j, token);
}
