/**
 * The MPI wire (docs/design.md#the-mpi-wire): a {@link Wire} whose envelopes travel as MPI point-to-point
 * messages between processes, so every algorithm of algorithms.ts, the header checks, timeouts,
 * traces and the simulated clock of transport.ts run unchanged over real MPI.
 *
 * An envelope is two messages on `comm`: its header as JSON (tag {@link TAG_HEADER}), then, when
 * the payload is not empty, the payload bytes (tag {@link TAG_PAYLOAD}), both MPI_Isend. MPI
 * keeps messages of one (source, tag, communicator) in order, so the k-th non-empty header from
 * a rank owns the k-th payload from that rank, and the payload is received straight into the
 * ArrayBuffer the communicator will read (no copy on either side).
 *
 * Progress is polled from the event loop: MPI_Improbe for headers from any rank and for the
 * payloads owed, MPI_Test on the sends in flight. A blocking probe on a helper thread would
 * answer faster but MPICH's blocking calls spin, and a spinning thread per rank would take the
 * cores the ranks train on. Polls run back to back while messages flow and back off to
 * {@link IDLE_MS} when nothing has moved for a while.
 */
import type { Envelope, Header } from '../transport.ts';
import type { NativeGroup, Wire } from '../wire.ts';
import type { GroupFamily } from '../groups.ts';
import { type MpiGroup, splitFamilies } from './native.ts';
import { check, MPI, mpi, STATUS_IGNORE } from './libmpi.ts';

export const TAG_HEADER = 1;
export const TAG_PAYLOAD = 2;
/** Poll interval once the wire has been idle for {@link IDLE_AFTER_MS}. */
const IDLE_MS = 2;
const IDLE_AFTER_MS = 50;

interface Outgoing {
  req: Int32Array;
  bufs: Uint8Array[];
}

export class MpiWire implements Wire {
  private arrive: ((src: number, env: Envelope) => void) | null = null;
  private readonly sends: Outgoing[] = [];
  /** Per source: headers whose payload has not been received yet, in order. */
  private readonly owed: { header: Header; bytes: number }[][];
  private timer: ReturnType<typeof setTimeout> | undefined;
  private lastMove = performance.now();
  private closed = false;
  private readonly status = new Int32Array(MPI.STATUS_INTS);
  private readonly message = new Int32Array(1);
  private readonly flag = new Int32Array(1);
  private readonly groups = new Map<string, MpiGroup>();
  /** MPI_Comm_split calls made by {@link split} (one per family). */
  splits = 0;
  private readonly splitIds = new Set<string>();
  private splitting: Promise<void> = Promise.resolve();

  /**
   * @param rank this process's rank in `comm`; @param worldSize the size of `comm`.
   * @param comm an MPI communicator handle (MPI_COMM_WORLD by default).
   */
  constructor(readonly rank: number, readonly worldSize: number, readonly comm: number = MPI.COMM_WORLD) {
    this.owed = Array.from({ length: worldSize }, () => []);
  }

  post(dst: number, env: Envelope): void {
    if (this.closed) throw new Error(`mpi wire: rank ${this.rank} is closed`);
    const header = new TextEncoder().encode(JSON.stringify({ h: env.header, n: env.payload.byteLength }));
    const bufs = [header];
    this.isend(header, dst, TAG_HEADER, bufs);
    if (env.payload.byteLength > 0) {
      const payload = new Uint8Array(env.payload);
      bufs.push(payload);
      this.isend(payload, dst, TAG_PAYLOAD, bufs);
    }
    this.wake();
  }

  /**
   * Splits `families` off this wire's communicator (native.ts splitFamilies): collective over
   * every rank, in the same order on each; afterwards this rank's groups run MPI's own
   * collectives on their split communicators. Calls made before an earlier one has finished
   * wait for it, so they reach MPI in the order they were made.
   * @throws Error for a group id split before, and what splitFamilies throws.
   */
  split(families: readonly GroupFamily[]): Promise<void> {
    const run = async () => {
      // Every family's ids, not only this rank's groups: the check then fails on every rank alike.
      const again = families.flatMap((f) => f.groups.map((g) => g.id)).find((id) => this.splitIds.has(id));
      if (again) throw new Error(`MPI_Comm_split: group '${again}' was already split (ids key the communicators)`);
      const made = await splitFamilies(families, this.rank, this.worldSize, this.comm);
      this.splits += families.length;
      for (const f of families) for (const g of f.groups) this.splitIds.add(g.id);
      for (const g of made) this.groups.set(g.id, g);
    };
    const done = this.splitting.then(run);
    this.splitting = done.catch(() => {});
    return done;
  }

  /**
   * MPI's own collectives on the group `id` of world ranks `ranks`: its communicator from
   * {@link split}. Making one here instead would be collective over ranks that may never call
   * it (only a group's members make the group), hence an error, before the call takes a
   * sequence number, on every member alike.
   * @throws Error when the group was not split, or was split over other ranks.
   */
  group(ranks: readonly number[], id: string): NativeGroup {
    const g = this.groups.get(id);
    if (!g) {
      throw new Error(
        `group '${id}' [${ranks}] has no MPI communicator: MPI's own collectives run on communicators split at world setup, ` +
          `so every rank of the world must split its family first ` +
          `(MpiWorld.split; docs/design.md#process-groups-are-mpi_comm_split-communicators), or call it with backend 'ours'`,
      );
    }
    if (g.ranks.join() !== ranks.join()) {
      throw new Error(`group '${id}' was split over ranks [${g.ranks}] but is used over [${ranks}]`);
    }
    return g;
  }

  /** The MPI communicator handle split for group `id` on this rank, if any. */
  splitComm(id: string): number | undefined {
    return this.groups.get(id)?.comm;
  }

  listen(arrive: (src: number, env: Envelope) => void): void {
    this.arrive = arrive;
    this.wake();
  }

  /** Stops polling. Sends still in flight are finished by {@link flush}; call it before MPI_Finalize. */
  close(): void {
    this.closed = true;
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  /**
   * Waits until every send of this wire has completed (MPI_Waitall on a helper thread).
   * @throws Error from MPI.
   */
  async flush(): Promise<void> {
    const pending = this.sends.splice(0);
    if (!pending.length) return;
    const reqs = new Int32Array(pending.length);
    pending.forEach((o, i) => (reqs[i] = o.req[0]));
    check(await mpi().MPI_Waitall(reqs.length, reqs, STATUS_IGNORE), 'MPI_Waitall');
  }

  private isend(buf: Uint8Array, dst: number, tag: number, keep: Uint8Array[]): void {
    const req = new Int32Array(1);
    check(mpi().MPI_Isend(buf, buf.byteLength, MPI.BYTE, dst, tag, this.comm, req), 'MPI_Isend');
    this.sends.push({ req, bufs: keep });
  }

  /** Schedules the next poll: at once while messages flow, every IDLE_MS after a quiet spell. */
  private wake(delay = 0): void {
    if (this.closed || this.timer !== undefined || !this.arrive) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      const moved = this.poll();
      if (moved) this.lastMove = performance.now();
      this.wake(performance.now() - this.lastMove > IDLE_AFTER_MS ? IDLE_MS : 0);
    }, delay);
  }

  /** One round of progress; returns whether anything was sent or received. */
  private poll(): boolean {
    if (this.closed) return false;
    const m = mpi();
    let moved = false;
    for (let i = this.sends.length - 1; i >= 0; i--) {
      check(m.MPI_Test(this.sends[i].req, this.flag, STATUS_IGNORE), 'MPI_Test');
      if (this.flag[0]) {
        this.sends.splice(i, 1);
        moved = true;
      }
    }
    for (let src = 0; src < this.worldSize; src++) {
      const owed = this.owed[src];
      // Delivered in arrival order: an empty envelope queued behind a payload waits for it.
      while (owed.length && (owed[0].bytes === 0 || this.probe(src, TAG_PAYLOAD))) {
        const { header, bytes } = owed.shift()!;
        const payload = new ArrayBuffer(bytes);
        if (bytes > 0) this.receive(new Uint8Array(payload));
        this.arrive!(src, { header, payload });
        moved = true;
      }
    }
    while (this.probe(MPI.ANY_SOURCE, TAG_HEADER)) {
      const src = this.status[2];
      const text = new Uint8Array(this.count());
      this.receive(text);
      const { h, n } = JSON.parse(new TextDecoder().decode(text)) as { h: Header; n: number };
      moved = true;
      if (n > 0 || this.owed[src].length) {
        this.owed[src].push({ header: h, bytes: n });
        this.wake(); // its payload may already be here
      } else this.arrive!(src, { header: h, payload: new ArrayBuffer(0) });
    }
    return moved;
  }

  /** MPI_Improbe for (src, tag): true with the message in `this.message` and its status in `this.status`. */
  private probe(src: number, tag: number): boolean {
    check(mpi().MPI_Improbe(src, tag, this.comm, this.flag, this.message, this.status), 'MPI_Improbe');
    return this.flag[0] !== 0;
  }

  private count(): number {
    const n = new Int32Array(1);
    check(mpi().MPI_Get_count(this.status, MPI.BYTE, n), 'MPI_Get_count');
    return n[0];
  }

  private receive(into: Uint8Array): void {
    check(mpi().MPI_Mrecv(into, into.byteLength, MPI.BYTE, this.message, STATUS_IGNORE), 'MPI_Mrecv');
  }
}
