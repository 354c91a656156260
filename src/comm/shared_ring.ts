/**
 * One direction of the shared data plane (docs/design.md#the-shared-data-plane-of-worker-ranks): a single-producer
 * single-consumer ring of variable-length records in a `SharedArrayBuffer`, written by one rank and read by one other.
 * A record is a 16-byte prefix (record bytes, header bytes, payload bytes), the header as JSON, then the payload, each
 * padded to 8 bytes so a payload can be read in place as a Float32Array or Int32Array. Records never straddle the end:
 * when one does not fit there, the writer leaves a wrap marker and starts again at 0, so the reader always sees one
 * contiguous payload and can reduce straight out of it.
 *
 * Two control words: `head` (next write offset, stored by the writer after the record is
 * complete, so the reader's load of it makes the bytes visible) and `tail` (next read offset,
 * stored by the reader once a record is consumed). head = tail means empty, so the writer never
 * fills the last byte: a write needs strictly less room than is free, and never overwrites a
 * record the reader has not released. A record may take at most half the ring (see maxRecord).
 */

/** Bytes before the ring's data: head and tail, padded to a cache line. */
export const CTRL_BYTES = 64;
/** Record prefix: record bytes, header bytes, payload bytes, spare (Int32 each). */
const PREFIX = 16;
/** A record length of −1 sends the reader back to offset 0. */
const WRAP = -1;
const align8 = (n: number) => (n + 7) & ~7;
/** Header JSON beyond which a record is refused (headers are ~150 bytes; group ids are short). */
export const MAX_HEADER_BYTES = 1024;

/** The bytes a record of `payloadBytes` takes in the ring, its header at most {@link MAX_HEADER_BYTES}. */
export function recordBytes(payloadBytes: number, headerBytes = MAX_HEADER_BYTES): number {
  return PREFIX + align8(headerBytes) + align8(payloadBytes);
}

/**
 * The largest record, in bytes, a ring of `cap` data bytes accepts: half the ring. A record must
 * be contiguous and the writer cannot move the reader's tail, so in an empty ring whose offsets
 * sit mid-way only the larger of the two free stretches is usable — at least half the ring.
 */
function maxRecord(cap: number): number {
  return ((cap >> 1) & ~7) - 8;
}

/** The largest payload, in bytes, a ring of `regionBytes` data bytes accepts (a little under half). */
export function maxPayload(regionBytes: number): number {
  return Math.max(0, maxRecord(regionBytes) - recordBytes(0));
}

/** One ring's views over its SharedArrayBuffer. */
export class Ring {
  readonly ctrl: Int32Array;
  readonly data: Uint8Array;
  private readonly words: Int32Array;
  /** Data bytes (a multiple of 8). */
  readonly cap: number;
  /** The reader's next offset (reader side only). */
  private readPos: number;
  private readonly scratch = new Uint8Array(MAX_HEADER_BYTES);
  private readonly decoder = new TextDecoder();
  private readonly encoder = new TextEncoder();

  constructor(readonly sab: SharedArrayBuffer) {
    this.ctrl = new Int32Array(sab, 0, 2);
    this.cap = (sab.byteLength - CTRL_BYTES) & ~7;
    this.data = new Uint8Array(sab, CTRL_BYTES, this.cap);
    this.words = new Int32Array(sab, CTRL_BYTES, this.cap / 4);
    this.readPos = Atomics.load(this.ctrl, 1);
  }

  /** A ring of `regionBytes` data bytes (rounded up to 8). */
  static create(regionBytes: number): SharedArrayBuffer {
    return new SharedArrayBuffer(CTRL_BYTES + align8(regionBytes));
  }

  /** The header as the bytes a record carries. @throws Error when it exceeds {@link MAX_HEADER_BYTES}. */
  encodeHeader(header: unknown): Uint8Array {
    const h = this.encoder.encode(JSON.stringify(header));
    if (h.byteLength > MAX_HEADER_BYTES) throw new Error(`shared plane: a ${h.byteLength}-byte header is too long`);
    return h;
  }

  /** Whether a record of these sizes always fits an empty ring, wherever its offsets stand. */
  fits(header: Uint8Array, payloadBytes: number): boolean {
    return recordBytes(payloadBytes, header.byteLength) <= maxRecord(this.cap);
  }

  /** Writes one record if there is room now; false when the reader must free space first (never overwrites). */
  tryWrite(header: Uint8Array, payload: Uint8Array): boolean {
    const need = recordBytes(payload.byteLength, header.byteLength);
    const head = Atomics.load(this.ctrl, 0), tail = Atomics.load(this.ctrl, 1);
    let at = head;
    if (head >= tail) {
      const end = head + need;
      if (end > this.cap || (end === this.cap && tail === 0)) {
        if (need >= tail) return false; // no room at the start either
        at = 0;
      }
    } else if (need >= tail - head) return false;
    if (at !== head) this.words[head >> 2] = WRAP;
    const w = at >> 2;
    this.words[w] = need;
    this.words[w + 1] = header.byteLength;
    this.words[w + 2] = payload.byteLength;
    this.data.set(header, at + PREFIX);
    this.data.set(payload, at + PREFIX + align8(header.byteLength));
    const next = at + need;
    Atomics.store(this.ctrl, 0, next === this.cap ? 0 : next); // publishes the record
    return true;
  }

  /** Whether a record is waiting (reader side). */
  ready(): boolean {
    return Atomics.load(this.ctrl, 0) !== this.readPos;
  }

  /**
   * Reads every waiting record in order, handing each to `use` with its header and a view of its
   * payload inside the ring, valid only during the call; the record is released when `use`
   * returns. Returns the number read (reader side).
   */
  drain(use: (header: unknown, payload: Uint8Array) => void): number {
    let n = 0;
    for (let head = Atomics.load(this.ctrl, 0); this.readPos !== head; head = Atomics.load(this.ctrl, 0)) {
      let at = this.readPos;
      if (this.words[at >> 2] === WRAP) at = 0;
      const w = at >> 2, len = this.words[w], hl = this.words[w + 1], pl = this.words[w + 2];
      this.scratch.set(this.data.subarray(at + PREFIX, at + PREFIX + hl)); // TextDecoder refuses shared memory
      const header = JSON.parse(this.decoder.decode(this.scratch.subarray(0, hl)));
      const off = CTRL_BYTES + at + PREFIX + align8(hl);
      const next = at + len;
      this.readPos = next === this.cap ? 0 : next;
      try {
        use(header, new Uint8Array(this.sab, off, pl));
      } finally {
        Atomics.store(this.ctrl, 1, this.readPos);
      }
      n++;
    }
    return n;
  }
}
