/**
 * A rank that communicates nothing and counts everything it would send
 * (docs/design.md#accounting-derived-from-the-model): the transport the real model code runs over when only its
 * per-step traffic is wanted, on one rank, with no peer alive.
 *
 * Collectives run as the wire's own ("native", call.ts) collectives, the path MPI's take: a counting group records
 * the call and leaves its buffers as they are (an allReduce echoes its input, a reduce-scatter's or all-gather's
 * output keeps what it held). What the rank would have sent is priced by comm/cost.ts collectiveTraffic with the
 * call's default algorithm, the algorithm every trainer's call uses, exactly as the message-by-message count
 * of the running collectives (tests/parallel/cost.test.ts holds the two equal). Point-to-point sends are counted as
 * they are posted and dropped; a receive gets zeros of the size its header names. Counts are keyed
 * `group/op` and in elements (4 bytes each), as parallel/mesh/traffic.ts keys a running rank's.
 */
import { Communicator, type NumArray } from './communicator.ts';
import { ALGORITHMS } from './call_options.ts';
import { collectiveTraffic, type SizedCollective } from './cost.ts';
import type { Envelope, Expect, Header } from './envelope.ts';
import { Transport } from './transport.ts';
import type { NativeGroup, Wire } from './wire.ts';

/** Elements by `group/op`. */
export type Counts = Record<string, number>;

/** The calls of one kind a counting rank made: one group, one op, one buffer size. */
export interface CountedCall {
  /** Group id (`tp[0,1]/act`, `pp[0,2]:p2p`, …). */
  group: string;
  /** World ranks of the group: its members, or for a point-to-point group those its id names. */
  ranks: number[];
  /** `allReduce`, `send`, …: the op of the key `group/op`. */
  op: string;
  /** Elements of one call's buffer (comm/cost.ts's convention; a send's message). */
  n: number;
  calls: number;
  /** Elements this rank sent in these calls (4 bytes each). */
  elements: number;
  messages: number;
}

/** Elements by `group/op` of `calls` (the keys a running rank's meter reports). */
export function countsOf(calls: readonly CountedCall[]): Counts {
  const out: Counts = {};
  for (const c of calls) out[`${c.group}/${c.op}`] = (out[`${c.group}/${c.op}`] ?? 0) + c.elements;
  return out;
}

/** The world ranks a group id names between its brackets (`pp[0,4]:p2p` → [0, 4]; `world` → none). */
function ranksNamed(id: string): number[] {
  const m = /\[([\d,]+)\]/.exec(id);
  return m ? m[1].split(',').map(Number) : [];
}

/** The wire of a counting rank: posts are counted and dropped, collectives are counted groups. */
class CountingWire implements Wire {
  readonly calls = new Map<string, CountedCall>();
  readonly members = new Map<string, number[]>();

  constructor(readonly rank: number, readonly worldSize: number) {}

  add(group: string, op: string, n: number, elements: number, messages: number): void {
    if (elements <= 0) return;
    const call = `${group}/${op}/${n}`;
    const had = this.calls.get(call);
    if (had) {
      had.calls++;
      had.elements += elements;
      had.messages += messages;
    } else {
      const ranks = this.members.get(group) ?? ranksNamed(group);
      this.calls.set(call, { group, ranks, op, n, calls: 1, elements, messages });
    }
  }

  post(_dst: number, env: Envelope): void {
    const n = env.payload.byteLength / 4;
    this.add(env.header.group, env.header.op, n, n, 1);
  }

  postView(_dst: number, header: Header, bytes: Uint8Array): void {
    const n = bytes.byteLength / 4;
    this.add(header.group, header.op, n, n, 1);
  }

  listen(): void {}
  close(): void {}

  group(ranks: readonly number[], id: string): NativeGroup {
    const p = ranks.length, r = ranks.indexOf(this.rank);
    this.members.set(id, [...ranks]);
    // n: the element count of the call's buffer (comm/cost.ts's convention: an all-gather's whole output).
    const count = (coll: SizedCollective, n: number, root = 0) => {
      const tr = collectiveTraffic(coll, ALGORITHMS[coll][0], n, p, r, root);
      this.add(id, coll, n, tr.elements, tr.messages);
      return Promise.resolve();
    };
    return {
      allReduce: (work: NumArray) => count('allReduce', work.length),
      reduceScatter: (input: NumArray) => count('reduceScatter', input.length),
      allGather: (_input: NumArray, out: NumArray) => count('allGather', out.length),
      broadcast: (work: NumArray, root: number) => count('broadcast', work.length, root),
      reduce: (input: NumArray, _out: NumArray, root: number) => count('reduce', input.length, root),
      allToAll: (input: NumArray) => count('allToAll', input.length),
      barrier: () => Promise.resolve(),
    };
  }
}

/** A transport whose receives are answered at once with zeros of the size their header names (point to point only). */
class CountingTransport extends Transport {
  override recvWith(src: number, expect: Expect, use: (bytes: Uint8Array) => void): Promise<void> {
    use(new Uint8Array(zeros(this.rank, src, expect)));
    return Promise.resolve();
  }

  override recvMany(srcs: number[], expect: Expect): Promise<ArrayBuffer[]> {
    return Promise.resolve(srcs.map((src) => zeros(this.rank, src, expect)));
  }
}

/** @throws Error for a collective's message: a counting rank's collectives are native and receive none. */
function zeros(rank: number, src: number, expect: Expect): ArrayBuffer {
  if (!expect.group.endsWith(':p2p')) {
    throw new Error(
      `counting rank ${rank}: ${expect.op} in group ${expect.group} waited for rank ${src}; its collectives must run on the counting backend`,
    );
  }
  return new ArrayBuffer(expect.count * 4);
}

/** A world communicator of {@link countingWorld}, with the counts of everything it sent. */
export interface CountingRank {
  /** World communicator of rank `rank` (backend `mpi`: every group made from it counts its collectives). */
  world: Communicator;
  /** Elements sent since the last call, by `group/op`; counting starts again from zero. */
  take(): Counts;
  /** The calls made since the last call, one entry per (group, op, buffer size); counting starts again. */
  takeCalls(): CountedCall[];
}

/**
 * Rank `rank` of a world of `worldSize` that sends nothing and counts what it would send (see the module doc).
 * @throws Error for a rank outside the world.
 */
export function countingWorld(rank: number, worldSize: number): CountingRank {
  const wire = new CountingWire(rank, worldSize);
  const world = Communicator.world(new CountingTransport(rank, wire, { trace: false }));
  world.backend = 'mpi';
  return {
    world,
    take() {
      return countsOf(this.takeCalls());
    },
    takeCalls() {
      const out = [...wire.calls.values()];
      wire.calls.clear();
      return out;
    },
  };
}
