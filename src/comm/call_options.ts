/**
 * The argument side of a {@link Communicator} call: the options every collective takes (algorithm,
 * receive timeout, reduction op, output array), the algorithms each collective accepts, and the
 * checks that turn a call's arguments into a validated choice or an error naming the bad one.
 * Separate from communicator.ts, which moves the data: benchmarks, cost models and test matrices
 * read {@link ALGORITHMS} and {@link Algorithm} without pulling in the communicator itself.
 */
import { dtypeOf } from './link.ts';
import type { NumArray, ReduceOp } from './algorithms.ts';
import type { Communicator } from './communicator.ts';

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

/** A collective named in {@link ALGORITHMS}. */
export type Collective = keyof typeof ALGORITHMS;

/**
 * Who runs a call: this project's algorithms over the transport (`ours`), or the MPI library's
 * own collective (`mpi`, only over the MPI transport) — mixed per call as MCR-DL does.
 */
export type Backend = 'ours' | 'mpi';

export interface CallOptions {
  /** Algorithm for this call; the default is the first entry of {@link ALGORITHMS}. Ignored by backend `mpi`. */
  algorithm?: Algorithm;
  /** Backend for this call (default: the communicator's `backend`); `auto` reads its tuning table. */
  backend?: Backend | 'auto';
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

/** The call's algorithm (default: the collective's first). @throws Error when `coll` does not accept it. */
export function pickAlgorithm(coll: Collective, opts: CallOptions): Algorithm {
  const allowed: readonly Algorithm[] = ALGORITHMS[coll];
  const a = opts.algorithm ?? allowed[0];
  if (!allowed.includes(a)) throw new Error(`${coll}: algorithm '${a}' is not one of ${allowed.join(', ')}`);
  return a;
}

/** A reducing call's algorithm and op (default `sum`). @throws Error for an unknown op, or `avg` on integers. */
export function pickReduce(
  coll: Collective,
  x: NumArray,
  opts: ReduceOptions<NumArray>,
): { algo: Algorithm; op: ReduceOp } {
  const op = opts.op ?? 'sum';
  if (!['sum', 'avg', 'max', 'min'].includes(op)) throw new Error(`${coll}: unknown op '${op}'`);
  if (op === 'avg' && dtypeOf(x) !== 'f32') throw new Error(`${coll}: op 'avg' needs a Float32Array`);
  return { algo: pickAlgorithm(coll, opts), op };
}

/** @throws Error unless `x` is a Float32Array or Int32Array of `n` elements (`what` names it). */
export function checkLength(x: NumArray, n: number, what: string): void {
  if (x.length !== n) throw new Error(`${what}: has ${x.length} elements, needs ${n}`);
  dtypeOf(x);
}

/** @throws Error unless `root` is a group rank of `comm`. */
export function checkRoot(comm: Communicator, root: number): void {
  if (!Number.isInteger(root) || root < 0 || root >= comm.size) {
    throw new Error(`root ${root} is outside group ${comm.id} of ${comm.size}`);
  }
}

/** @throws Error unless `peer` is another group rank of `comm` (`what` names the call). */
export function checkPeer(comm: Communicator, peer: number, what: string): void {
  if (!Number.isInteger(peer) || peer < 0 || peer >= comm.size || peer === comm.rank) {
    throw new Error(`${what}: peer ${peer} is not another rank of group ${comm.id} (size ${comm.size})`);
  }
}

/** @throws Error unless `ranks` are distinct world ranks of a world of `n` that include `me` (newGroup's members). */
export function checkGroupRanks(ranks: readonly number[], n: number, me: number): void {
  if (
    ranks.length === 0 || new Set(ranks).size !== ranks.length ||
    ranks.some((r) => !Number.isInteger(r) || r < 0 || r >= n)
  ) {
    throw new Error(`newGroup: ranks [${ranks}] must be distinct world ranks in 0…${n - 1}`);
  }
  if (!ranks.includes(me)) throw new Error(`newGroup: rank ${me} is not a member of [${ranks}]`);
}
