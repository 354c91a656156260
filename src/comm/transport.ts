/**
 * The data plane of one rank (docs/design.md#ranks-and-the-collective-layer and
 * docs/design.md#the-shared-data-plane-of-worker-ranks) over a {@link Wire}: a MessagePort mesh, the shared-memory
 * rings of worker ranks (shared_wire.ts) or MPI (mpi/wire.ts).
 *
 * Every message is an {@link Envelope}: a {@link Header} naming the call it belongs to plus a
 * payload. Receives match by (group, sequence number) and then check op, detail, dtype, count
 * and tag (mailbox.ts), so a rank that calls a different collective than its peer fails at once
 * with an error naming both calls. Every wait has a timeout that lists the ranks whose messages
 * never arrived.
 * Every send and receive is recorded as a span by the rank's {@link Tracer} and moves its
 * {@link SimClock}: a send stamps the simulated arrival into the header, a receive waits for it.
 *
 * Runtime-neutral: no Deno APIs; runs in browser and Deno module workers alike.
 */
import { type NetworkModel, SimClock } from './network.ts';
import { algorithmOf, Tracer, wallMs } from './trace.ts';
import { type NativeGroup, PortWire, type Wire } from './wire.ts';

import { type Envelope, type Expect, type Header, timeoutText } from './envelope.ts';
import { Mailbox, type Waiter } from './mailbox.ts';

export type { Wire } from './wire.ts';
export { describeCall, type DType, type Envelope, type Expect, type Header } from './envelope.ts';

/** Options for {@link Transport}. */
export interface TransportOptions {
  /** Default wait limit of every receive, in milliseconds (default 30 000). */
  timeoutMs?: number;
  /** Network model driving the simulated clock; absent: messages cost no simulated time. */
  net?: NetworkModel | null;
  /** Record spans (default true). */
  trace?: boolean;
}

/**
 * One rank's end of the mesh, over a {@link Wire} (a port list builds a {@link PortWire}:
 * `ports[j]` is the port to global rank j, `null` at j = rank).
 *
 * Errors: constructor throws if the port list has the wrong length or a missing peer;
 * {@link recvMany} rejects on a header mismatch (naming both calls) or on timeout (listing
 * ranks that never arrived and, per rank, what did arrive instead); any call after
 * {@link close} throws.
 */
export class Transport {
  readonly rank: number;
  readonly worldSize: number;
  /** Default receive timeout in ms. */
  timeoutMs: number;
  private readonly wire: Wire;
  /** Arrived messages and waiting receives, and the rule that pairs them (mailbox.ts). */
  private readonly box: Mailbox;
  private closed = false;
  /** Background clocks by group id ({@link backgroundClock}). */
  private readonly streams = new Map<string, SimClock>();
  /** This rank's simulated clock (its network model may be swapped at any time). */
  readonly clock: SimClock;
  /** This rank's span recorder. */
  readonly tracer: Tracer;

  constructor(rank: number, wire: (MessagePort | null)[] | Wire, options: TransportOptions = {}) {
    const n = Array.isArray(wire) ? wire.length : wire.worldSize;
    this.rank = rank;
    this.worldSize = n;
    this.timeoutMs = options.timeoutMs ?? 30_000;
    this.clock = new SimClock(rank, options.net ?? null);
    this.tracer = new Tracer(rank, this.clock, options.trace ?? true);
    if (!Number.isInteger(rank) || rank < 0 || rank >= n) {
      throw new Error(`transport: rank ${rank} is outside a world of ${n}`);
    }
    this.wire = Array.isArray(wire) ? new PortWire(rank, wire) : wire;
    this.box = new Mailbox(rank, n);
    this.wire.listen((src, env) => this.box.arrive(src, env));
  }

  /**
   * Sends `payload` to global rank `dst`: an ArrayBuffer is given away (transferred, detached
   * here afterwards); a typed array is copied by the wire (into the shared ring, or a copy is
   * transferred), so the caller may reuse it at once. `header.src` is filled in. Throws for dst =
   * self or out of range, or (shared plane) for a message larger than the ring.
   */
  send(dst: number, header: Omit<Header, 'src'>, payload: ArrayBuffer | ArrayBufferView): void {
    this.checkOpen();
    if (dst === this.rank || !Number.isInteger(dst) || dst < 0 || dst >= this.worldSize) {
      throw new Error(`transport: rank ${this.rank} cannot send to rank ${dst} (world of ${this.worldSize})`);
    }
    const clock = this.clockOf(header.group), start = wallMs(), simStart = clock.now;
    const simArrival = clock.send(dst, payload.byteLength);
    const env = { header: { ...header, src: this.rank, simArrival } };
    this.tracer.record({
      kind: 'send',
      op: header.op,
      group: header.group,
      algorithm: algorithmOf(header.detail),
      bytes: payload.byteLength,
      peer: dst,
      start,
      end: start,
      simStart,
      simEnd: simStart,
      simArrival,
      seq: header.seq,
    });
    if (payload instanceof ArrayBuffer) this.wire.post(dst, { header: env.header, payload });
    else {
      const bytes = new Uint8Array(payload.buffer, payload.byteOffset, payload.byteLength);
      if (this.wire.postView) this.wire.postView(dst, env.header, bytes);
      else this.wire.post(dst, { header: env.header, payload: bytes.slice().buffer });
    }
  }

  /**
   * The simulated clock of the messages of group `id` from now on: a fork of this rank's clock
   * (network.ts SimClock.fork), so a collective the rank does not wait for (low_comm's overlapped
   * outer allReduce) moves it rather than the rank's own; the caller joins it where it waits.
   */
  backgroundClock(id: string): SimClock {
    let c = this.streams.get(id);
    if (!c) this.streams.set(id, c = this.clock.fork());
    c.net = this.clock.net;
    return c;
  }

  private clockOf(group: string): SimClock {
    return this.streams.get(group) ?? this.clock;
  }

  /** Receives one message from global rank `src` matching `expect`; see {@link recvMany}. */
  async recv(src: number, expect: Expect, timeoutMs = this.timeoutMs): Promise<ArrayBuffer> {
    return (await this.recvMany([src], expect, timeoutMs))[0];
  }

  /**
   * Receives one message from each rank in `srcs` (all with the same expected header), under
   * one deadline. Resolves to the payloads in `srcs` order. Rejects with
   * "rank R called <call> in group G#S but rank Q sent <call>" on a mismatch, or with
   * "rank R timed out after T ms in <call> (group G#S) waiting for rank(s) A, B" on timeout.
   */
  async recvMany(srcs: number[], expect: Expect, timeoutMs = this.timeoutMs): Promise<ArrayBuffer[]> {
    const out: ArrayBuffer[] = new Array(srcs.length);
    await this.receive(srcs, expect, timeoutMs, (i, env) => {
      out[i] = env.borrowed ? env.borrowed.slice().buffer : env.payload;
    });
    return out;
  }

  /**
   * Receives one message from global rank `src` matching `expect` and hands its payload bytes to
   * `use` the moment it is matched, before resolving; the bytes may be a view into the shared
   * ring, valid only during the call, so `use` reduces or copies them straight into its result
   * (docs/design.md#the-shared-data-plane-of-worker-ranks). Errors as {@link recvMany}.
   */
  recvWith(src: number, expect: Expect, use: (bytes: Uint8Array) => void, timeoutMs = this.timeoutMs): Promise<void> {
    return this.receive([src], expect, timeoutMs, (_, env) => use(env.borrowed ?? new Uint8Array(env.payload)));
  }

  private receive(
    srcs: number[],
    expect: Expect,
    timeoutMs: number,
    take: (i: number, env: Envelope) => void,
  ): Promise<void> {
    this.checkOpen();
    const out: boolean[] = new Array(srcs.length);
    if (srcs.length === 0) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      let left = srcs.length;
      let done = false;
      const clock = this.clockOf(expect.group), start = wallMs(), simStart = clock.now;
      const mine: Waiter[] = [];
      const finish = (err?: Error) => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        for (const w of mine) this.box.withdraw(w);
        if (err) reject(err);
        else resolve();
      };
      const timer = setTimeout(() => {
        const missing = srcs.filter((_, i) => !out[i]);
        finish(new Error(timeoutText(this.rank, timeoutMs, expect, missing, this.box.pending)));
      }, timeoutMs);
      srcs.forEach((src, i) => {
        if (src === this.rank || src < 0 || src >= this.worldSize) {
          finish(new Error(`transport: rank ${this.rank} cannot receive from rank ${src}`));
          return;
        }
        const w: Waiter = {
          src,
          expect,
          resolve: (env) => {
            out[i] = true;
            try {
              take(i, env);
            } catch (e) {
              finish(e instanceof Error ? e : new Error(String(e)));
              return;
            }
            clock.receive(env.header.simArrival ?? 0);
            this.tracer.record({
              kind: 'recv',
              op: expect.op,
              group: expect.group,
              algorithm: algorithmOf(expect.detail),
              bytes: (env.borrowed ?? env.payload).byteLength,
              peer: src,
              start,
              end: wallMs(),
              simStart,
              simEnd: clock.now,
              seq: expect.seq,
            });
            if (--left === 0) finish();
          },
          reject: (e) => finish(e),
        };
        mine.push(w);
        this.box.wait(w);
      });
      for (const src of new Set(srcs)) if (!done) this.box.drain(src);
      if (!done) this.wire.await?.(() => done);
    });
  }

  /**
   * The wire library's own collectives on group `id` of world ranks `ranks` (the `mpi` backend).
   * @throws Error when the wire has none (MessagePorts), naming the transport that does; what
   *   the wire throws (MPI: a group that was not split at world setup).
   */
  nativeGroup(ranks: readonly number[], id: string): NativeGroup {
    if (!this.wire.group) {
      throw new Error(
        `backend 'mpi' runs MPI's own collectives and needs the MPI transport (--transport mpi under mpirun); rank ${this.rank} runs over MessagePorts`,
      );
    }
    return this.wire.group(ranks, id);
  }

  /** Closes the wire (every port); pending receives are rejected. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.box.rejectAll(() => new Error(`transport: rank ${this.rank} closed`));
    this.wire.close();
  }

  private checkOpen(): void {
    if (this.closed) throw new Error(`transport: rank ${this.rank} is closed`);
  }
}
