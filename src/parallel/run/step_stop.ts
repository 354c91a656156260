/**
 * A stop request shared by the host and every rank of a world (one SharedArrayBuffer), so a
 * batch of steps (run.ts `trainSteps`) ends early at a step boundary every rank agrees on,
 * without a collective per step (which would change the traffic every step is checked against).
 *
 * Slot 0 is the request flag (set by the host, e.g. on SIGINT); slot 1 the boundary: the steps
 * done when every rank stops. The first rank that sees the request before starting step s sets
 * the boundary to s + 1: every step has a collective over the whole world (the loss and
 * gradient norm are global), so while that rank has not started step s no rank can have
 * finished it, i.e. no rank is past s + 1; ranks still in step s − 1 run on to s + 1 too.
 * Runtime-neutral; where SharedArrayBuffer is unavailable (a page without cross-origin
 * isolation) no stop is shared and batches run to their end.
 */

const NONE = 0x7fff_ffff;

export class StepStop {
  readonly buffer: SharedArrayBuffer;
  private readonly a: Int32Array;

  /** A new request (host side), or a view of the host's `buffer` (rank side). */
  constructor(buffer?: SharedArrayBuffer) {
    this.buffer = buffer ?? new SharedArrayBuffer(8);
    this.a = new Int32Array(this.buffer);
    if (!buffer) Atomics.store(this.a, 1, NONE);
  }

  /** Asks every rank to stop at the next step boundary they can agree on. */
  request(): void {
    Atomics.store(this.a, 0, 1);
  }

  get requested(): boolean {
    return Atomics.load(this.a, 0) === 1;
  }

  /** Rank side, before starting step `next`: whether to stop here (see the module doc). */
  stopsBefore(next: number): boolean {
    if (!this.requested) return false;
    Atomics.compareExchange(this.a, 1, NONE, next + 1);
    return next >= Atomics.load(this.a, 1);
  }
}
