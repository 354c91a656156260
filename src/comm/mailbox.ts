/**
 * The receive side of one rank's {@link Transport} (docs/design.md#ranks-and-the-collective-layer and
 * docs/design.md#the-shared-data-plane-of-worker-ranks): per source rank, the messages that arrived and were not yet
 * taken, in arrival order, and the receives waiting for one, and the rule that pairs them. A message answers a receive
 * when group and sequence number agree; it must then agree on op, detail, dtype and count as well, or the receive fails
 * naming both calls; the tag picks among messages of the same call. Kept apart from transport.ts, which adds the
 * clocks, spans and deadlines around it, so the matching rule reads in one place.
 */
import { describeCall, type Envelope, type Expect } from './envelope.ts';

/** One receive waiting for a message from `src`. */
export interface Waiter {
  src: number;
  expect: Expect;
  /** Takes the matched envelope synchronously (a borrowed payload is valid only during the call). */
  resolve: (env: Envelope) => void;
  reject: (err: Error) => void;
}

/** The arrived messages and waiting receives of rank `rank` in a world of `worldSize`. */
export class Mailbox {
  /** Arrived but not yet matched messages, per source rank, in arrival order. */
  readonly pending: Envelope[][];
  private readonly waiters: Waiter[][];

  constructor(readonly rank: number, worldSize: number) {
    this.pending = Array.from({ length: worldSize }, () => []);
    this.waiters = Array.from({ length: worldSize }, () => []);
  }

  /** Queues `w` behind the receives already waiting for its source; {@link drain} matches it. */
  wait(w: Waiter): void {
    this.waiters[w.src].push(w);
  }

  /** Withdraws `w` (its receive finished, failed or timed out); a no-op once it was matched. */
  withdraw(w: Waiter): void {
    const list = this.waiters[w.src];
    const i = list.indexOf(w);
    if (i >= 0) list.splice(i, 1);
  }

  /** Rejects every waiting receive with `why()` (the transport closes). */
  rejectAll(why: () => Error): void {
    for (const list of this.waiters) {
      for (const w of list.splice(0)) w.reject(why());
    }
  }

  /** Queues a message from `src` and hands it to a waiting receive when one matches. */
  arrive(src: number, env: Envelope): void {
    const pend = this.pending[src];
    pend.push(env);
    this.drain(src);
    // Nobody took the borrowed view: keep a copy, so the ring's space is freed
    // (docs/design.md#the-shared-data-plane-of-worker-ranks).
    if (env.borrowed && pend.includes(env)) {
      env.payload = env.borrowed.slice().buffer;
      delete env.borrowed;
    }
  }

  /** Matches waiters for `src` against arrived messages, oldest first. */
  drain(src: number): void {
    const waiters = this.waiters[src];
    const pend = this.pending[src];
    for (let wi = 0; wi < waiters.length;) {
      const w = waiters[wi];
      const e = w.expect;
      const same = pend.find((m) => m.header.group === e.group && m.header.seq === e.seq);
      if (!same) {
        wi++;
        continue;
      }
      const h = same.header;
      if (h.op !== e.op || h.detail !== e.detail || h.dtype !== e.dtype || h.count !== e.count) {
        // Leave the message queued: the peer's call is still what it is.
        waiters.splice(wi, 1);
        w.reject(
          new Error(
            `rank ${this.rank} called ${
              describeCall(e.op === 'send' ? { ...e, op: 'recv' } : e)
            } in group ${e.group}#${e.seq} ` +
              `but rank ${src} sent ${describeCall(h)}`,
          ),
        );
        continue;
      }
      const mi = pend.findIndex((m) => m.header.group === e.group && m.header.seq === e.seq && m.header.tag === e.tag);
      if (mi < 0) {
        wi++;
        continue;
      }
      const env = pend[mi];
      waiters.splice(wi, 1);
      pend.splice(mi, 1);
      w.resolve(env);
    }
  }
}
