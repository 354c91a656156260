/**
 * Counts what a rank actually puts on the wire, per group and collective, so a parallel
 * strategy can report "elements sent per step per collective" measured rather than predicted
 * (docs/design.md#the-correctness-contract-of-a-parallel-plan: the trace must equal the analytical formula exactly,
 * counted in elements).
 *
 * It wraps the rank's `Transport.send` once (every Communicator over that transport shares
 * it), so point-to-point and every collective algorithm are seen, headers included. The
 * collective layer's own tracer (src/comm/trace.ts) records the same messages as spans; this
 * meter only keeps running totals that a step can snapshot and reset cheaply.
 */
import type { Communicator } from '../../comm/communicator.ts';
import type { Transport } from '../../comm/transport.ts';

/** Elements sent, keyed `group/op` (e.g. `dp[0,1]/grads/reduceScatter`). */
export type Sent = Record<string, number>;

const meters = new WeakMap<Transport, TrafficMeter>();

export class TrafficMeter {
  private counts = new Map<string, number>();

  private constructor(transport: Transport) {
    const send = transport.send.bind(transport);
    // Payloads are f32 or i32, so elements = bytes / 4 for every message the collectives send.
    transport.send = (dst, header, payload) => {
      const key = `${header.group}/${header.op}`;
      this.counts.set(key, (this.counts.get(key) ?? 0) + payload.byteLength / 4);
      return send(dst, header, payload);
    };
  }

  /** The meter of `comm`'s transport (installed on first use, then shared). */
  static of(comm: Communicator): TrafficMeter {
    let m = meters.get(comm.transport);
    if (!m) meters.set(comm.transport, m = new TrafficMeter(comm.transport));
    return m;
  }

  /** Totals since the last {@link take}, then starts counting from zero again. */
  take(): Sent {
    const out = Object.fromEntries(this.counts);
    this.counts.clear();
    return out;
  }
}

/** a + b, key by key. */
export function addSent(a: Sent, b: Sent): Sent {
  const out = { ...a };
  for (const [k, n] of Object.entries(b)) out[k] = (out[k] ?? 0) + n;
  return out;
}
