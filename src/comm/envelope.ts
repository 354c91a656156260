/**
 * The message format of the collective layer (docs/design.md#ranks-and-the-collective-layer): every message is an
 * {@link Envelope} — a {@link Header} naming the call it belongs to and a transferred payload —
 * matched by (group, seq) and checked field by field against what the receiver {@link Expect}s.
 */

/** Element types carried on the wire. */
export type DType = 'f32' | 'i32';

/** Describes one message: which call it belongs to and what it holds. */
export interface Header {
  /** Group id, e.g. `world` or `tp[0,1]`; point-to-point traffic uses `<group>:p2p`. */
  group: string;
  /** Per-group sequence number of the call (collectives: shared by all members of the group). */
  seq: number;
  /** Call name in NCCL / torch.distributed spelling: `allReduce`, `send`, ... */
  op: string;
  /** Call detail that must agree between peers, e.g. `sum/ring` or `root=0/binomial`. */
  detail: string;
  dtype: DType;
  /** Element count of the whole call on the caller (not of this message's payload). */
  count: number;
  /** Global rank of the sender. */
  src: number;
  /** Collectives: index of this message among those sent from src to dst in the call. p2p: user tag. */
  tag: number;
  /** Simulated arrival time at the receiver, µs (network.ts); set by {@link Transport.send}. */
  simArrival?: number;
}

/** What a receiver expects; `src` is implied by the port. */
export type Expect = Omit<Header, 'src' | 'simArrival'>;

/** One message on the wire. */
export interface Envelope {
  header: Header;
  payload: ArrayBuffer;
  /**
   * Shared plane (docs/design.md#the-shared-data-plane-of-worker-ranks): the payload as a view into the sender's ring,
   * valid only while the wire's arrive callback runs; `payload` is then empty and the transport either consumes the
   * view at once or copies it.
   */
  borrowed?: Uint8Array;
}

/** `allReduce(sum/ring, f32×1024)`: how headers appear in error messages. */
export function describeCall(h: Pick<Header, 'op' | 'detail' | 'dtype' | 'count'>): string {
  return `${h.op}(${h.detail ? h.detail + ', ' : ''}${h.dtype}×${h.count})`;
}

/**
 * "rank R timed out after T ms in <call> (group G#S) waiting for rank(s) A, B", plus, per missing
 * rank, what did arrive from it instead (`pending[src]`, unmatched envelopes in arrival order).
 */
export function timeoutText(
  rank: number,
  ms: number,
  expect: Expect,
  missing: number[],
  pending: Envelope[][],
): string {
  const seen = missing.map((s) => {
    const got = pending[s].map((e) => `${describeCall(e.header)} in group ${e.header.group}#${e.header.seq}`);
    return got.length ? `; from rank ${s} only ${got.join(', ')} arrived` : '';
  }).join('');
  return `rank ${rank} timed out after ${ms} ms in ${describeCall(expect)} ` +
    `(group ${expect.group}#${expect.seq}) waiting for rank(s) ${missing.join(', ')}${seen}`;
}
