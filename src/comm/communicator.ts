/**
 * `Communicator`: NCCL / torch.distributed collectives on CPU typed arrays (Float32Array,
 * Int32Array) over a {@link Transport} mesh (docs/design.md §13). Ranks passed to and returned by a
 * communicator are *group-local* (0 … size−1), as in NCCL communicators; `ranks[i]` maps
 * them to world ranks.
 *
 * Calling convention (NCCL's): without `out` a call is in place; with `out` the input is left
 * untouched. Every member of a group must issue the same calls on it in the same order; each
 * call takes the group's next sequence number, and a peer calling something else fails with an
 * error naming both calls (see transport.ts). Algorithms (MPICH, see algorithms.ts) are chosen
 * per call; all produce bit-identical results for integer-valued inputs.
 *
 * Every call is recorded as a `collective` span by the rank's Tracer (trace.ts; its messages as
 * `send`/`recv` spans by the transport) and moves the rank's simulated clock (network.ts). GPU
 * tensors go through `TensorComm` (tensor_comm.ts), which wraps a Communicator.
 */
import type { Transport } from './transport.ts';
import { alloc, callLink, dtypeOf, nextSeq, peekSeq } from './link.ts';
import * as A from './algorithms.ts';
import type { Link, NumArray, ReduceOp } from './algorithms.ts';
import { algorithmOf, type Tracer, wallMs } from './trace.ts';

export type { NumArray, ReduceOp } from './algorithms.ts';

/** Algorithm names; which collective accepts which is listed in {@link ALGORITHMS}. */
export type Algorithm = 'ring' | 'recursive-doubling' | 'rabenseifner' | 'binomial' | 'direct';

/** Accepted algorithms per collective, default first. */
export const ALGORITHMS = {
  allReduce: ['ring', 'recursive-doubling', 'rabenseifner', 'binomial', 'direct'],
  reduceScatter: ['ring', 'rabenseifner', 'direct'],
  allGather: ['ring', 'recursive-doubling', 'direct'],
  broadcast: ['binomial', 'direct'],
  reduce: ['binomial', 'direct'],
  allToAll: ['direct'],
  barrier: ['recursive-doubling', 'direct'],
} as const satisfies Record<string, readonly Algorithm[]>;

export interface CallOptions {
  /** Algorithm for this call; the default is the first entry of {@link ALGORITHMS}. */
  algorithm?: Algorithm;
  /** Receive timeout in ms for this call (default: the transport's). */
  timeoutMs?: number;
}

export interface ReduceOptions<T extends NumArray> extends CallOptions {
  /** Reduction; default `sum`. `avg` divides the sum by the group size (Float32Array only). */
  op?: ReduceOp;
  /** Output array (out of place); omitted: in place. */
  out?: T;
}

export interface GatherOptions<T extends NumArray> extends CallOptions {
  out?: T;
}

export class Communicator {
  /** World ranks of the members, indexed by group rank. */
  readonly ranks: readonly number[];
  /** Group id carried in every header (`world`, a given name, or `[0,2,4]`). */
  readonly id: string;
  /** This rank's group-local rank. */
  readonly rank: number;
  readonly size: number;

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
   * the id is `name` or `[r0,r1,…]`. Throws if a rank is invalid or repeated, or if this rank
   * is not a member.
   */
  newGroup(ranks: number[], name?: string): Communicator {
    const n = this.transport.worldSize;
    if (
      ranks.length === 0 || new Set(ranks).size !== ranks.length ||
      ranks.some((r) => !Number.isInteger(r) || r < 0 || r >= n)
    ) {
      throw new Error(`newGroup: ranks [${ranks}] must be distinct world ranks in 0…${n - 1}`);
    }
    if (!ranks.includes(this.transport.rank)) {
      throw new Error(`newGroup: rank ${this.transport.rank} is not a member of [${ranks}]`);
    }
    return new Communicator(this.transport, [...ranks], name ?? `[${ranks.join(',')}]`);
  }

  /**
   * Sends `data` (copied, then the copy's buffer transferred) to group rank `dst`. Buffered:
   * resolves at once, like MPI_Ibsend. Pairs are matched in order per (group, src, dst).
   */
  send(data: NumArray, dst: number, opts: { tag?: number } = {}): Promise<void> {
    this.checkPeer(dst, 'send');
    const g = this.ranks[dst];
    const key = `${this.id}:p2p:${this.transport.rank}>${g}`;
    this.transport.send(g, {
      group: `${this.id}:p2p`,
      seq: nextSeq(this.transport, key),
      op: 'send',
      detail: '',
      dtype: dtypeOf(data),
      count: data.length,
      tag: opts.tag ?? 0,
    }, data.slice().buffer);
    return Promise.resolve();
  }

  /** Receives into `out` from group rank `src`; dtype, length and tag must match the send. */
  async recv<T extends NumArray>(out: T, src: number, opts: { tag?: number; timeoutMs?: number } = {}): Promise<T> {
    this.checkPeer(src, 'recv');
    const g = this.ranks[src];
    const key = `${this.id}:p2p:${g}>${this.transport.rank}`;
    const buf = await this.transport.recv(g, {
      group: `${this.id}:p2p`,
      seq: nextSeq(this.transport, key),
      op: 'send',
      detail: '',
      dtype: dtypeOf(out),
      count: out.length,
      tag: opts.tag ?? 0,
    }, opts.timeoutMs);
    out.set(dtypeOf(out) === 'f32' ? new Float32Array(buf) : new Int32Array(buf));
    return out;
  }

  /** Root's `buf` (group rank) reaches every rank's `out ?? buf`. Returns that array. */
  async broadcast<T extends NumArray>(buf: T, root: number, opts: GatherOptions<T> = {}): Promise<T> {
    this.checkRoot(root);
    const algo = this.pick('broadcast', opts);
    const work = opts.out ?? buf;
    if (opts.out) this.checkLen(opts.out, buf.length, 'broadcast out');
    if (this.rank === root && work !== buf) work.set(buf);
    await this.call(
      'broadcast',
      `root=${root}/${algo}`,
      buf,
      opts,
      (l) => algo === 'direct' ? A.directBroadcast(l, work, root) : A.binomialBroadcast(l, work, root),
    );
    return work;
  }

  /**
   * Reduces every rank's `buf` into root's `out ?? buf`. Non-root buffers are left untouched.
   * Returns root's result on root and the untouched `out ?? buf` elsewhere.
   */
  async reduce<T extends NumArray>(buf: T, root: number, opts: ReduceOptions<T> = {}): Promise<T> {
    this.checkRoot(root);
    const { algo, op } = this.pickReduce('reduce', buf, opts);
    if (opts.out) this.checkLen(opts.out, buf.length, 'reduce out');
    const work = buf.slice() as T;
    await this.call(
      'reduce',
      `${op}/root=${root}/${algo}`,
      buf,
      opts,
      (l) => algo === 'direct' ? A.directReduce(l, work, root, op) : A.binomialReduce(l, work, root, op),
    );
    const res = opts.out ?? buf;
    if (this.rank === root) res.set(this.finish(work, op));
    return res;
  }

  /** Every rank gets the reduction of all ranks' `buf` in `out ?? buf`. Any length. */
  async allReduce<T extends NumArray>(buf: T, opts: ReduceOptions<T> = {}): Promise<T> {
    const { algo, op } = this.pickReduce('allReduce', buf, opts);
    if (opts.out) this.checkLen(opts.out, buf.length, 'allReduce out');
    const work = opts.out ?? buf;
    if (work !== buf) work.set(buf);
    const offs = A.chunkOffsets(buf.length, this.size);
    await this.call('allReduce', `${op}/${algo}`, buf, opts, async (l) => {
      if (algo === 'ring') {
        await A.ringReduceScatter(l, work, offs, op);
        await A.ringAllGather(l, work, offs);
      } else if (algo === 'recursive-doubling') await A.doublingAllReduce(l, work, op);
      else if (algo === 'rabenseifner') await A.rabenseifnerAllReduce(l, work, op);
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
    const { algo, op } = this.pickReduce('reduceScatter', input, opts);
    if (input.length % this.size) {
      throw new Error(`reduceScatter: ${input.length} elements do not split over ${this.size} ranks`);
    }
    const c = input.length / this.size;
    if (opts.out) this.checkLen(opts.out, c, 'reduceScatter out');
    const work = opts.out ? input.slice() as T : input;
    const offs = A.chunkOffsets(input.length, this.size);
    await this.call(
      'reduceScatter',
      `${op}/${algo}`,
      input,
      opts,
      (l) =>
        algo === 'ring'
          ? A.ringReduceScatter(l, work, offs, op)
          : algo === 'rabenseifner'
          ? A.halvingReduceScatter(l, work, offs, op)
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
    const algo = this.pick('allGather', opts);
    const c = input.length;
    const work = opts.out ?? alloc(input, c * this.size);
    this.checkLen(work, c * this.size, 'allGather out');
    work.set(input, c * this.rank);
    const offs = A.chunkOffsets(work.length, this.size);
    await this.call(
      'allGather',
      algo,
      input,
      opts,
      (l) =>
        algo === 'ring'
          ? A.ringAllGather(l, work, offs)
          : algo === 'recursive-doubling'
          ? A.doublingAllGather(l, work, offs)
          : A.directAllGather(l, work, offs),
    );
    return work;
  }

  /** Chunk j of `input` (size × c elements) goes to rank j; chunk i of the result came from rank i. */
  async allToAll<T extends NumArray>(input: T, opts: GatherOptions<T> = {}): Promise<T> {
    this.pick('allToAll', opts);
    if (input.length % this.size) {
      throw new Error(`allToAll: ${input.length} elements do not split over ${this.size} ranks`);
    }
    if (opts.out) this.checkLen(opts.out, input.length, 'allToAll out');
    const src = opts.out && opts.out !== input ? input : input.slice() as T;
    const out = opts.out ?? input;
    await this.call(
      'allToAll',
      'direct',
      input,
      opts,
      (l) => A.pairwiseAllToAll(l, src, out, A.chunkOffsets(input.length, this.size)),
    );
    return out;
  }

  /** Returns once every member has entered the barrier. */
  async barrier(opts: CallOptions = {}): Promise<void> {
    const algo = this.pick('barrier', opts);
    const token = new Int32Array(0);
    await this.call(
      'barrier',
      algo,
      token,
      opts,
      (l) => algo === 'direct' ? A.directBarrier(l, token) : A.disseminationBarrier(l, token),
    );
  }

  // ---- internals ----

  private pick(coll: keyof typeof ALGORITHMS, opts: CallOptions): Algorithm {
    const allowed: readonly Algorithm[] = ALGORITHMS[coll];
    const a = opts.algorithm ?? allowed[0];
    if (!allowed.includes(a)) throw new Error(`${coll}: algorithm '${a}' is not one of ${allowed.join(', ')}`);
    return a;
  }

  private pickReduce(coll: keyof typeof ALGORITHMS, x: NumArray, opts: ReduceOptions<NumArray>) {
    const op = opts.op ?? 'sum';
    if (!['sum', 'avg', 'max', 'min'].includes(op)) throw new Error(`${coll}: unknown op '${op}'`);
    if (op === 'avg' && dtypeOf(x) !== 'f32') throw new Error(`${coll}: op 'avg' needs a Float32Array`);
    return { algo: this.pick(coll, opts), op };
  }

  /** Divides by the group size for `avg`. */
  private finish<T extends NumArray>(x: T, op: ReduceOp): T {
    if (op === 'avg') { for (let i = 0; i < x.length; i++) x[i] /= this.size; }
    return x;
  }

  private checkLen(x: NumArray, n: number, what: string): void {
    if (x.length !== n) throw new Error(`${what}: has ${x.length} elements, needs ${n}`);
    dtypeOf(x);
  }

  private checkRoot(root: number): void {
    if (!Number.isInteger(root) || root < 0 || root >= this.size) {
      throw new Error(`root ${root} is outside group ${this.id} of ${this.size}`);
    }
  }

  private checkPeer(peer: number, what: string): void {
    if (!Number.isInteger(peer) || peer < 0 || peer >= this.size || peer === this.rank) {
      throw new Error(`${what}: peer ${peer} is not another rank of group ${this.id} (size ${this.size})`);
    }
  }

  /** This rank's span recorder (also the hook for tracing compute: `comm.tracer.span(name, fn)`). */
  get tracer(): Tracer {
    return this.transport.tracer;
  }

  /** Runs one collective call's `body` over its Link, recorded as a `collective` span. */
  private async call(
    op: string,
    detail: string,
    x: NumArray,
    opts: CallOptions,
    body: (l: Link) => Promise<unknown>,
  ): Promise<void> {
    const start = wallMs(), simStart = this.transport.clock.now;
    const seq = peekSeq(this.transport, this.id);
    await body(this.link(op, detail, x, opts));
    this.tracer.record({
      kind: 'collective',
      op,
      group: this.id,
      algorithm: algorithmOf(detail),
      bytes: x.byteLength,
      peer: -1,
      start,
      end: wallMs(),
      simStart,
      simEnd: this.transport.clock.now,
      seq,
    });
  }

  /** One call's Link (see link.ts): takes the group's next sequence number. */
  private link(op: string, detail: string, x: NumArray, opts: CallOptions): Link {
    return callLink(this.transport, this.ranks, this.rank, this.id, op, detail, x, opts.timeoutMs);
  }
}
