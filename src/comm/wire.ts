/**
 * The wires a Transport (transport.ts) runs over (docs/design.md#ranks-and-the-collective-layer): how envelopes move
 * between ranks. Matching, timeouts, tracing and the simulated clock stay in transport.ts, the same over every wire.
 * Runtime-neutral: the MPI wire (comm/mpi/wire.ts) is Deno-only and lives apart.
 */
import type { Envelope, Header } from './envelope.ts';
import type { NumArray } from './algorithms.ts';

/**
 * The collectives a wire's own library runs on one process group (MPI's MPI_Allreduce …: the
 * `mpi` backend of a call, MCR-DL's mixing of backends), on group-local ranks. `avg` is the
 * caller's (a sum, then divided), so the reductions are sum, max and min. Buffers: see each call.
 */
export interface NativeGroup {
  /** work (n) ← the reduction over the group, in place. */
  allReduce(work: NumArray, op: NativeOp): Promise<void>;
  /** out (c) ← the reduction of chunk `rank` of every rank's input (size × c). */
  reduceScatter(input: NumArray, out: NumArray, op: NativeOp): Promise<void>;
  /** out (size × c) ← every rank's input (c), in rank order. */
  allGather(input: NumArray, out: NumArray): Promise<void>;
  /** work ← root's work. */
  broadcast(work: NumArray, root: number): Promise<void>;
  /** root's out ← the reduction of every rank's input; other ranks' out untouched. */
  reduce(input: NumArray, out: NumArray, root: number, op: NativeOp): Promise<void>;
  /** out chunk j ← chunk `rank` of rank j's input (both size × c). */
  allToAll(input: NumArray, out: NumArray): Promise<void>;
  barrier(): Promise<void>;
}
export type NativeOp = 'sum' | 'max' | 'min';

/** How envelopes move between ranks: MessagePorts ({@link PortWire}) or MPI (comm/mpi/wire.ts); used by {@link Transport}. */
export interface Wire {
  readonly worldSize: number;
  /** Moves `env` to world rank `dst` ≠ this rank; the payload buffer is given away. */
  post(dst: number, env: Envelope): void;
  /**
   * Moves `header` + `bytes` (a view the caller keeps using, so the wire copies it before
   * returning), where the wire can copy straight from the caller's array (the shared plane).
   */
  postView?(dst: number, header: Header, bytes: Uint8Array): void;
  /**
   * Called when a receive found nothing yet: the wire may look for arrivals (and spin briefly)
   * until `done()` says the receive is satisfied.
   */
  await?(done: () => boolean): void;
  /**
   * Sets the callback every arriving envelope goes to, with its sender's world rank. An envelope
   * with `borrowed` set is valid only during the call.
   */
  listen(arrive: (src: number, env: Envelope) => void): void;
  close(): void;
  /**
   * The library's own collectives on the group of world ranks `ranks` (group `id`), where the
   * wire has them (MPI: on the group's communicator split at setup, else an error).
   */
  group?(ranks: readonly number[], id: string): NativeGroup;
}

/** The in-process mesh: `ports[j]` leads to rank j (`null` at j = rank); payloads are transferred. */
export class PortWire implements Wire {
  readonly worldSize: number;

  /** @throws Error when a peer's port is missing. */
  constructor(readonly rank: number, private readonly ports: (MessagePort | null)[]) {
    this.worldSize = ports.length;
    ports.forEach((port, j) => {
      if (j !== rank && !port) throw new Error(`transport: rank ${rank} has no port to rank ${j}`);
    });
  }

  post(dst: number, env: Envelope): void {
    this.ports[dst]!.postMessage(env, [env.payload]);
  }

  listen(arrive: (src: number, env: Envelope) => void): void {
    this.ports.forEach((port, j) => {
      if (port) port.onmessage = (ev: MessageEvent<Envelope>) => arrive(j, ev.data);
    });
  }

  close(): void {
    for (const p of this.ports) p?.close();
  }
}
