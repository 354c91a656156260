/**
 * The shared-memory wire (docs/design.md#the-shared-data-plane-of-worker-ranks): envelopes between worker ranks of one
 * process travel through `SharedArrayBuffer` rings, one per ordered pair of ranks (shared_ring.ts), and a doorbell word
 * per rank that senders bump (data) and receivers bump (space freed), instead of one postMessage per message. Matching,
 * header checks, timeouts, traces and the simulated clock stay the transport's (transport.ts), as over the other wires.
 *
 * Waiting never blocks the event loop that drives the GPU: a receive that finds nothing spins for
 * at most {@link SharedPlane.spinUs} (none when ranks outnumber cores: the peer could not run
 * meanwhile; shorter after spins that missed), then the rank sleeps in `Atomics.waitAsync` on its
 * doorbell. A payload read while its receive is waiting is handed over as a view into the ring
 * (the algorithms reduce or copy straight out of it); one that arrives early is copied out so the
 * ring never holds messages nobody has asked for (which could otherwise fill it and stall the
 * calls behind). A send that finds the ring full is copied to an outbox and written once the
 * reader frees space (backpressure: nothing is overwritten, order is kept).
 *
 * Runtime-neutral: needs SharedArrayBuffer and Atomics (Deno always; a browser only when the page
 * is cross-origin isolated; data_plane.ts chooses the plane and builds the rings).
 */
import type { Envelope, Header } from './envelope.ts';
import { describeCall } from './envelope.ts';
import { maxPayload, Ring } from './shared_ring.ts';
import type { Wire } from './wire.ts';

/** What every rank of a shared-plane world receives at join (structured-cloned: the buffers stay shared). */
export interface SharedPlane {
  /** rings[src][dst]: the ring src writes and dst reads (null on the diagonal). */
  rings: (SharedArrayBuffer | null)[][];
  /** Int32 pairs per rank: [2r] doorbell count, [2r + 1] 1 while rank r sleeps on it. */
  bells: SharedArrayBuffer;
  /** Data bytes of each ring. */
  regionBytes: number;
  /** Longest spin of a receive before it sleeps, µs (0: sleep at once). */
  spinUs: number;
}

interface Outgoing {
  header: Uint8Array;
  payload: Uint8Array;
}

/** One rank's end of the shared plane; see the module doc. */
export class SharedWire implements Wire {
  readonly worldSize: number;
  private readonly inbound: (Ring | null)[];
  private readonly outbound: (Ring | null)[];
  private readonly outbox: Outgoing[][];
  private readonly bells: Int32Array;
  private arrive: ((src: number, env: Envelope) => void) | null = null;
  private closed = false;
  /** The current spin, µs (see {@link await}). */
  private spin: number;
  private skipped = 0;

  constructor(readonly rank: number, readonly plane: SharedPlane) {
    this.worldSize = plane.rings.length;
    this.inbound = plane.rings.map((row) => row[rank] && new Ring(row[rank]!));
    this.outbound = plane.rings[rank].map((sab) => sab && new Ring(sab));
    this.outbox = this.outbound.map(() => []);
    this.bells = new Int32Array(plane.bells);
    this.spin = plane.spinUs;
  }

  /**
   * Writes `header` + `bytes` into the ring to `dst` (the one copy a send makes), or into the
   * outbox when the ring is full.
   * @throws Error naming --region-mb and --data-plane when the message can never fit the ring.
   */
  postView(dst: number, header: Header, bytes: Uint8Array): void {
    if (this.closed) throw new Error(`shared plane: rank ${this.rank} is closed`);
    const ring = this.outbound[dst]!;
    const h = ring.encodeHeader(header);
    if (!ring.fits(h, bytes.byteLength)) {
      const mib = (b: number) => `${+(b / (1 << 20)).toFixed(2)} MiB`;
      const need = Math.ceil((2 * bytes.byteLength) / (1 << 20)) + 1; // a message may fill half a region
      const call = `${describeCall(header)} message of ${mib(bytes.byteLength)} to rank ${dst}`;
      throw new Error(
        `shared data plane: rank ${this.rank}'s ${call} (group ${header.group}#${header.seq}) does not fit its ` +
          `${mib(ring.cap)} region (at most ${mib(maxPayload(ring.cap))} per message): ` +
          `raise --region-mb to at least ${need} or use --data-plane message`,
      );
    }
    const queue = this.outbox[dst];
    if (queue.length === 0 && ring.tryWrite(h, bytes)) this.ring(dst);
    else queue.push({ header: h, payload: bytes.slice() }); // the caller may reuse its buffer at once
  }

  /** {@link Wire.post}: the payload buffer is copied into the ring. */
  post(dst: number, env: Envelope): void {
    this.postView(dst, env.header, new Uint8Array(env.payload));
  }

  listen(arrive: (src: number, env: Envelope) => void): void {
    this.arrive = arrive;
    void this.sleepLoop();
  }

  /**
   * Reads what has arrived and writes what the outboxes hold, spinning while `done` is false (a
   * receive is waiting): called by the transport when a receive finds nothing, after this rank's
   * sends of the step are out, so the spin cannot delay them. The spin adapts: a spin that ends
   * without the message halves the next one (down to none for a while: on a busy machine the
   * peer is not running and spinning only takes its core), one that catches it doubles it, up to
   * the plane's spinUs.
   */
  await(done: () => boolean): void {
    this.pump();
    if (done() || this.plane.spinUs <= 0) return;
    if (this.spin < 1) {
      if (++this.skipped < SKIP_AFTER_MISS) return;
      this.skipped = 0;
      this.spin = 2; // probe again
    }
    const end = performance.now() + this.spin / 1e3;
    let seen = Atomics.load(this.bells, 2 * this.rank);
    while (!done() && performance.now() < end) {
      const now = Atomics.load(this.bells, 2 * this.rank);
      if (now !== seen) {
        seen = now;
        this.pump();
      }
    }
    this.spin = done() ? Math.min(this.plane.spinUs, this.spin * 2) : this.spin / 2;
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    Atomics.add(this.bells, 2 * this.rank, 1);
    Atomics.notify(this.bells, 2 * this.rank);
  }

  /** Delivers every waiting record and flushes the outboxes; rings the peers whose space it freed. */
  private pump(): void {
    if (this.closed || !this.arrive) return;
    const arrive = this.arrive;
    this.inbound.forEach((ring, src) => {
      if (!ring?.ready()) return;
      ring.drain((header, view) => arrive(src, { header: header as Header, payload: EMPTY, borrowed: view }));
      this.ring(src); // space freed: a sender with a full outbox may go on
    });
    this.outbox.forEach((queue, dst) => {
      let k = 0;
      while (k < queue.length && this.outbound[dst]!.tryWrite(queue[k].header, queue[k].payload)) k++;
      if (k) {
        queue.splice(0, k);
        this.ring(dst);
      }
    });
  }

  /** Bumps rank r's doorbell and wakes it if it sleeps. */
  private ring(r: number): void {
    Atomics.add(this.bells, 2 * r, 1);
    if (Atomics.load(this.bells, 2 * r + 1)) Atomics.notify(this.bells, 2 * r);
  }

  /** Sleeps on the doorbell between messages (Atomics.waitAsync, or a 1 ms timer where it is missing). */
  private async sleepLoop(): Promise<void> {
    const me = 2 * this.rank;
    let busy = 0;
    while (!this.closed) {
      const seen = Atomics.load(this.bells, me);
      this.pump();
      Atomics.store(this.bells, me + 1, 1);
      if (Atomics.load(this.bells, me) === seen && !this.closed) {
        busy = 0;
        // The sleep flag is set before the last look, so a sender that bumps after it also notifies.
        const wait = (Atomics as unknown as { waitAsync?: WaitAsync }).waitAsync;
        if (wait) {
          const r = wait(this.bells, me, seen);
          if (r.async) await r.value;
        } else await new Promise((res) => setTimeout(res, 1));
      }
      Atomics.store(this.bells, me + 1, 0);
      // Let the continuations of what was delivered run before the next pump; while messages keep
      // coming, a timer now and then lets the rest of the event loop (GPU, control calls) in too.
      if (++busy % 64) await null;
      else await new Promise((res) => setTimeout(res, 0));
    }
  }
}

const EMPTY = new ArrayBuffer(0);
/** Receives that sleep at once after the spin has shrunk to nothing, before it is tried again. */
const SKIP_AFTER_MISS = 32;

/** Atomics.waitAsync (ES2024; declared here for the browser build's older lib). */
type WaitAsync = (
  a: Int32Array,
  index: number,
  value: number,
  timeoutMs?: number,
) => { async: false; value: string } | { async: true; value: Promise<string> };
