/**
 * Collective algorithms over a {@link Link} (one call's view of its group: p ranks, own
 * group-local rank r, ordered send/recv to peers). They follow MPICH's intra-communicator
 * algorithms (src/mpi/coll/*): ring reduce-scatter / all-gather (as in NCCL's ring allreduce),
 * recursive doubling, Rabenseifner's recursive halving + doubling, binomial trees, pairwise
 * all-to-all and the dissemination barrier. Recursive doubling and Rabenseifner, with MPICH's
 * fold for non-power-of-two p, are in halving_doubling.ts.
 *
 * Sends never block (a MessagePort queues; a full shared ring queues in its wire's outbox,
 * docs/design.md#the-shared-data-plane-of-worker-ranks), so every exchange is "send, then receive" without deadlock.
 * Buffers are plain CPU typed arrays; `offs` are element offsets of per-rank chunks (length p+1). Every function
 * mutates `work` in place.
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
   * array is a view into the peer's ring, valid only during `use`
   * (docs/design.md#the-shared-data-plane-of-worker-ranks), so reducing or copying inside `use` needs no intermediate
   * copy.
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
