/**
 * `Communicator`: NCCL / torch.distributed collectives on CPU typed arrays (Float32Array,
 * Int32Array) over a {@link Transport} mesh (docs/design.md#ranks-and-the-collective-layer). Ranks passed to
 * and returned by a communicator are *group-local* (0 … size−1), as in NCCL communicators;
 * `ranks[i]` maps them to world ranks.
 *
 * Calling convention (NCCL's): without `out` a call is in place; with `out` the input is left
 * untouched. Every member of a group must issue the same calls on it in the same order; each
 * call takes the group's next sequence number, and a peer calling something else fails with an
 * error naming both calls (see transport.ts). Algorithms (MPICH, see algorithms.ts and
 * halving_doubling.ts) are chosen per call (call_options.ts: the options, accepted algorithms
 * and argument checks); all produce bit-identical results for integer-valued inputs.
 *
 * Every call is recorded as a `collective` span by the rank's Tracer (trace.ts; its messages as
 * `send`/`recv` spans by the transport) and moves the rank's simulated clock (network.ts). GPU
 * tensors go through `TensorComm` (tensor_comm.ts), which wraps a Communicator.
 */
import type { Transport } from './transport.ts';
import { alloc, p2pExpect } from './link.ts';
import type { NativeGroup } from './wire.ts';
import { nativeOp, runCall } from './call.ts';
import type { TuningTable } from './tuning.ts';
import * as A from './algorithms.ts';
import * as H from './halving_doubling.ts';
import type { Link, NumArray, ReduceOp } from './algorithms.ts';
import type { Tracer } from './trace.ts';
import {
  type Backend,
  type CallOptions,
  checkGroupRanks,
  checkLength,
  checkPeer,
  checkRoot,
  type GatherOptions,
  pickAlgorithm,
  pickReduce,
  type ReduceOptions,
} from './call_options.ts';

export type { NumArray, ReduceOp } from './algorithms.ts';

export class Communicator {
  /** World ranks of the members, indexed by group rank. */
  readonly ranks: readonly number[];
  /** Group id carried in every header (`world`, a given name, or `[0,2,4]`). */
  readonly id: string;
  /** This rank's group-local rank. */
  readonly rank: number;
  readonly size: number;
  /**
   * Backend of calls that do not name one (`CallOptions.backend`): this project's algorithms,
   * MPI's own collectives, or `auto`, the faster of the two per call from {@link tuning}.
   */
  backend: Backend | 'auto' = 'ours';
  /** The measured backend choices `auto` reads (tuning.ts). */
  tuning: TuningTable | null = null;
  private native: NativeGroup | null = null;

  /** The world communicator over `transport` (group id `world`). */
  static world(transport: Transport): Communicator {
    return new Communicator(transport, [...Array(transport.worldSize).keys()], 'world');
  }

  private constructor(readonly transport: Transport, ranks: number[], id: string) {
    this.ranks = ranks;
    this.id = id;
    this.rank = ranks.indexOf(transport.rank);
    this.size = ranks.length;
  }

  /**
   * A communicator over world ranks `ranks` (their order defines group ranks), like
   * torch.distributed.new_group. Local: no messages. Members must use the same ranks and name;
   * the id is `name` or `[r0,r1,…]`; the group takes this communicator's backend and tuning table.
   * Throws if a rank is invalid or repeated, or if this rank is not a member.
   */
  newGroup(ranks: number[], name?: string): Communicator {
    checkGroupRanks(ranks, this.transport.worldSize, this.transport.rank);
    const g = new Communicator(this.transport, [...ranks], name ?? `[${ranks.join(',')}]`);
    g.backend = this.backend; // a run's --comm-backend reaches every process group
    g.tuning = this.tuning;
    return g;
  }

  /**
   * Sends `data` (copied by the wire: into the shared ring, or a copy transferred) to group rank
   * `dst`. Buffered: resolves at once, like MPI_Ibsend. Pairs are matched in order per (group, src, dst).
   */
  send(data: NumArray, dst: number, opts: { tag?: number } = {}): Promise<void> {
    checkPeer(this, dst, 'send');
    const g = this.ranks[dst];
    this.transport.send(
      g,
      p2pExpect(this.transport, this.id, this.transport.rank, g, data, opts.tag),
      data,
    );
    return Promise.resolve();
  }

  /** Receives into `out` from group rank `src`; dtype, length and tag must match the send. */
  async recv<T extends NumArray>(out: T, src: number, opts: { tag?: number; timeoutMs?: number } = {}): Promise<T> {
    checkPeer(this, src, 'recv');
    const g = this.ranks[src];
    const expect = p2pExpect(this.transport, this.id, g, this.transport.rank, out, opts.tag);
    await this.transport.recvWith(g, expect, (b) => {
      new Uint8Array(out.buffer, out.byteOffset, out.byteLength).set(b); // dtype and count checked by the header
    }, opts.timeoutMs);
    return out;
  }

  /** Root's `buf` (group rank) reaches every rank's `out ?? buf`. Returns that array. */
  async broadcast<T extends NumArray>(buf: T, root: number, opts: GatherOptions<T> = {}): Promise<T> {
    checkRoot(this, root);
    const algo = pickAlgorithm('broadcast', opts);
    const work = opts.out ?? buf;
    if (opts.out) checkLength(opts.out, buf.length, 'broadcast out');
    if (this.rank === root && work !== buf) work.set(buf);
    await this.call(
      'broadcast',
      `root=${root}/${algo}`,
      buf,
      opts,
      (g) => g.broadcast(work, root),
      (l) => algo === 'direct' ? A.directBroadcast(l, work, root) : A.binomialBroadcast(l, work, root),
    );
    return work;
  }

  /**
   * Reduces every rank's `buf` into root's `out ?? buf`. Non-root buffers are left untouched.
   * Returns root's result on root and the untouched `out ?? buf` elsewhere.
   */
  async reduce<T extends NumArray>(buf: T, root: number, opts: ReduceOptions<T> = {}): Promise<T> {
    checkRoot(this, root);
    const { algo, op } = pickReduce('reduce', buf, opts);
    if (opts.out) checkLength(opts.out, buf.length, 'reduce out');
    const work = buf.slice() as T;
    await this.call(
      'reduce',
      `${op}/root=${root}/${algo}`,
      buf,
      opts,
      (g) => g.reduce(buf.slice(), work, root, nativeOp(op)),
      (l) => algo === 'direct' ? A.directReduce(l, work, root, op) : A.binomialReduce(l, work, root, op),
    );
    const res = opts.out ?? buf;
    if (this.rank === root) res.set(this.finish(work, op));
    return res;
  }

  /** Every rank gets the reduction of all ranks' `buf` in `out ?? buf`. Any length. */
  async allReduce<T extends NumArray>(buf: T, opts: ReduceOptions<T> = {}): Promise<T> {
    const { algo, op } = pickReduce('allReduce', buf, opts);
    if (opts.out) checkLength(opts.out, buf.length, 'allReduce out');
    const work = opts.out ?? buf;
    if (work !== buf) work.set(buf);
    const offs = A.chunkOffsets(buf.length, this.size);
    const native = (g: NativeGroup) => g.allReduce(work, nativeOp(op));
    await this.call('allReduce', `${op}/${algo}`, buf, opts, native, async (l) => {
      if (algo === 'ring') {
        await A.ringReduceScatter(l, work, offs, op);
        await A.ringAllGather(l, work, offs);
      } else if (algo === 'recursive-doubling') await H.doublingAllReduce(l, work, op);
      else if (algo === 'rabenseifner') await H.rabenseifnerAllReduce(l, work, op);
      else if (algo === 'binomial') {
        await A.binomialReduce(l, work, 0, op);
        await A.binomialBroadcast(l, work, 0);
      } else await A.directAllReduce(l, work, op);
    });
    this.finish(work, op);
    return work;
  }

  /**
   * `input` holds size × c elements; rank i gets the reduction of chunk i in `out` (c
   * elements) or, in place, in `input.subarray(i·c, (i+1)·c)` (returned; the rest of `input`
   * is left with partial results). Throws if input.length is not a multiple of size.
   */
  async reduceScatter<T extends NumArray>(input: T, opts: ReduceOptions<T> = {}): Promise<T> {
    const { algo, op } = pickReduce('reduceScatter', input, opts);
    if (input.length % this.size) {
      throw new Error(`reduceScatter: ${input.length} elements do not split over ${this.size} ranks`);
    }
    const c = input.length / this.size;
    if (opts.out) checkLength(opts.out, c, 'reduceScatter out');
    const work = opts.out ? input.slice() as T : input;
    const offs = A.chunkOffsets(input.length, this.size);
    await this.call(
      'reduceScatter',
      `${op}/${algo}`,
      input,
      opts,
      (g) => g.reduceScatter(input.slice(), work.subarray(offs[this.rank], offs[this.rank + 1]), nativeOp(op)),
      (l) =>
        algo === 'ring'
          ? A.ringReduceScatter(l, work, offs, op)
          : algo === 'rabenseifner'
          ? H.halvingReduceScatter(l, work, offs, op)
          : A.directReduceScatter(l, work, offs, op),
    );
    const mine = this.finish(work.subarray(offs[this.rank], offs[this.rank + 1]), op) as T;
    if (!opts.out) return mine;
    opts.out.set(mine);
    return opts.out;
  }

  /**
   * Every rank's `input` (c elements) lands at chunk i of `out` (size × c; allocated if
   * omitted). In place: pass `out` with `input = out.subarray(rank·c, (rank+1)·c)`.
   */
  async allGather<T extends NumArray>(input: T, opts: GatherOptions<T> = {}): Promise<T> {
    const algo = pickAlgorithm('allGather', opts);
    const c = input.length;
    const work = opts.out ?? alloc(input, c * this.size);
    checkLength(work, c * this.size, 'allGather out');
    work.set(input, c * this.rank);
    const offs = A.chunkOffsets(work.length, this.size);
    await this.call(
      'allGather',
      algo,
      input,
      opts,
      (g) => g.allGather(input.slice(), work),
      (l) =>
        algo === 'ring'
          ? A.ringAllGather(l, work, offs)
          : algo === 'recursive-doubling'
          ? H.doublingAllGather(l, work, offs)
          : A.directAllGather(l, work, offs),
    );
    return work;
  }

  /** Chunk j of `input` (size × c elements) goes to rank j; chunk i of the result came from rank i. */
  async allToAll<T extends NumArray>(input: T, opts: GatherOptions<T> = {}): Promise<T> {
    pickAlgorithm('allToAll', opts);
    if (input.length % this.size) {
      throw new Error(`allToAll: ${input.length} elements do not split over ${this.size} ranks`);
    }
    if (opts.out) checkLength(opts.out, input.length, 'allToAll out');
    const src = opts.out && opts.out !== input ? input : input.slice() as T;
    const out = opts.out ?? input;
    await this.call(
      'allToAll',
      'direct',
      input,
      opts,
      (g) => g.allToAll(src, out),
      (l) => A.pairwiseAllToAll(l, src, out, A.chunkOffsets(input.length, this.size)),
    );
    return out;
  }

  /** Returns once every member has entered the barrier. */
  async barrier(opts: CallOptions = {}): Promise<void> {
    const algo = pickAlgorithm('barrier', opts);
    const token = new Int32Array(0);
    await this.call(
      'barrier',
      algo,
      token,
      opts,
      (g) => g.barrier(),
      (l) => algo === 'direct' ? A.directBarrier(l, token) : A.disseminationBarrier(l, token),
    );
  }

  // ---- internals ----

  /** Divides by the group size for `avg`. */
  private finish<T extends NumArray>(x: T, op: ReduceOp): T {
    if (op === 'avg') { for (let i = 0; i < x.length; i++) x[i] /= this.size; }
    return x;
  }

  /** This rank's span recorder (also the hook for tracing compute: `comm.tracer.span(name, fn)`). */
  get tracer(): Tracer {
    return this.transport.tracer;
  }

  /**
   * MPI's own collectives on this group (the `mpi` backend): its communicator split at world setup
   * (docs/design.md#two-backends-per-call-mcr-dl). @throws Error over MessagePorts, or for a group that was not split.
   */
  nativeGroup(): NativeGroup {
    return this.native ??= this.transport.nativeGroup(this.ranks, this.id);
  }

  /** Runs one collective call (call.ts): `body` over its Link, or the `native` collective under backend `mpi`. */
  private call(
    op: string,
    detail: string,
    x: NumArray,
    opts: CallOptions,
    native: (g: NativeGroup) => Promise<unknown>,
    body: (l: Link) => Promise<unknown>,
  ): Promise<void> {
    return runCall(this, { op, detail, x, timeoutMs: opts.timeoutMs, backend: opts.backend }, native, body);
  }
}
