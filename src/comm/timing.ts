/**
 * Rank tasks that run one collective by name: `one` (a single call, for traces) and `time`
 * (nccl-tests' loop, time-bounded: warm-up, then timed calls until a minimum time and count have
 * passed, each call timed on its own) used by `npm run bench -- comm` (src/bench/comm.ts).
 * The loop's rules ({@link nextChunk}, {@link summarize}) are shared with the MPI reference
 * loops (src/bench/mpi_ref.ts and its C twin), so every column of the bench is timed alike.
 * Runtime-neutral.
 */
import type { Communicator } from './communicator.ts';
import type { Algorithm, Backend } from './call_options.ts';
import type { RankTask } from './launch.ts';
import type { SizedCollective } from './cost.ts';

/** One call of `coll` with `algorithm` (or MPI's own, backend `mpi`) on a buffer of `bytes` f32 bytes (S as in cost.ts; root 0). */
export function runCollective(
  c: Communicator,
  coll: SizedCollective,
  algorithm: string | undefined,
  buf: Float32Array,
  backend?: Backend,
): Promise<unknown> {
  const opts = { algorithm: algorithm as Algorithm | undefined, backend };
  switch (coll) {
    case 'allReduce':
      return c.allReduce(buf, opts);
    case 'reduceScatter':
      return c.reduceScatter(buf, opts);
    case 'allGather':
      return c.allGather(buf.subarray(0, buf.length / c.size), { ...opts, out: buf });
    case 'broadcast':
      return c.broadcast(buf, 0, opts);
    case 'reduce':
      return c.reduce(buf, 0, opts);
    case 'allToAll':
      return c.allToAll(buf, opts);
  }
  throw new Error(`runCollective: unknown collective '${coll}'`);
}

/**
 * How long the `time` loop runs: at least `warmup` calls and `warmupMs` of warm-up (untimed),
 * then at least `minIters` timed calls and `minMs` of timed calls, never more than `maxIters`.
 */
export interface TimingBudget {
  warmup: number;
  warmupMs: number;
  minIters: number;
  minMs: number;
  maxIters: number;
}

/** The bench's defaults (nccl-tests: -w 5 warm-up calls; here also ≥ 20 ms of them, then ≥ 100 ms timed). */
export const DEFAULT_BUDGET: TimingBudget = { warmup: 5, warmupMs: 20, minIters: 10, minMs: 100, maxIters: 100_000 };

/** `--quick` (tests): a handful of calls, no minimum time. */
export const QUICK_BUDGET: TimingBudget = { warmup: 1, warmupMs: 0, minIters: 3, minMs: 0, maxIters: 1000 };

/**
 * The next batch of a time-bounded loop: every rank runs the same batches, and between batches
 * the ranks agree (max over ranks) on `elapsedMs`, the timed ms so far, so they stop together.
 * The first batch is `minCalls`; later ones aim at the remaining time at the rate so far (×1.2).
 * @param done calls so far; @param elapsedMs the slowest rank's summed call time so far (each
 *   rank sums its own calls; the ranks agree on the largest sum).
 * @returns the calls to run next, 0 when the loop is over.
 */
export function nextChunk(done: number, elapsedMs: number, minCalls: number, minMs: number, maxCalls: number): number {
  if (done >= maxCalls || (done >= minCalls && elapsedMs >= minMs)) return 0;
  if (done < minCalls) return Math.min(minCalls - done, maxCalls - done);
  const perCall = Math.max(elapsedMs / done, 1e-4);
  return Math.max(1, Math.min(maxCalls - done, Math.ceil(((minMs - elapsedMs) / perCall) * 1.2)));
}

/** A call's time statistics, ms per call. */
export interface CallStats {
  /** Timed calls. */
  iters: number;
  min: number;
  /** Nearest-rank percentiles of the per-call times. */
  median: number;
  p90: number;
  mean: number;
}

/** min / median / p90 (nearest rank: the ⌈q·n⌉-th smallest) / mean of per-call times `ms`. @throws Error when empty. */
export function summarize(ms: ArrayLike<number>): CallStats {
  const n = ms.length;
  if (!n) throw new Error('summarize: no timed calls');
  const s = Float64Array.from(ms).sort();
  const at = (q: number) => s[Math.max(0, Math.ceil(q * n) - 1)];
  let sum = 0;
  for (const x of s) sum += x;
  return { iters: n, min: s[0], median: at(0.5), p90: at(0.9), mean: sum / n };
}

/** Arguments of the `one` and `time` tasks. */
export interface TimingArgs extends Partial<TimingBudget> {
  coll: SizedCollective;
  algorithm?: string;
  /** `mpi`: MPI's own collective instead of `algorithm` (MPI transport only). */
  backend?: Backend;
  /** S in bytes (a multiple of 4 × world size for the chunked collectives). */
  bytes: number;
  /** `time`: also measure the simulated time of one call (default true). */
  sim?: boolean;
}

/** What `time` reports per rank: this rank's statistics of the timed calls (ms per call). */
export interface TimingResult extends CallStats {
  /** The first warm-up call, ms: what a cold, first-time call costs. */
  firstMs: number;
  /** Simulated µs of one call on this rank (0 without a network model or with `sim: false`). */
  simUs: number;
}

function buffer(world: Communicator, args: TimingArgs): Float32Array {
  const n = args.bytes / 4;
  if (
    !Number.isInteger(n) ||
    (args.coll !== 'broadcast' && args.coll !== 'reduce' && args.coll !== 'allReduce' && n % world.size)
  ) {
    throw new Error(`${args.coll}: ${args.bytes} bytes is not a whole number of f32 chunks over ${world.size} ranks`);
  }
  return new Float32Array(n).fill(1);
}

/** Runs calls in agreed batches until nextChunk says stop; returns each call's ms. */
async function timedLoop(
  world: Communicator,
  call: () => Promise<unknown>,
  minCalls: number,
  minMs: number,
  maxCalls: number,
): Promise<number[]> {
  const times: number[] = [];
  let mine = 0, elapsed = 0;
  for (let n; (n = nextChunk(times.length, elapsed, minCalls, minMs, maxCalls)) > 0;) {
    for (let i = 0; i < n; i++) {
      const t0 = performance.now();
      await call();
      const dt = performance.now() - t0;
      times.push(dt);
      mine += dt;
    }
    // The stop decision is collective (untimed), so every rank makes the same number of calls:
    // the slowest rank's summed call time.
    elapsed = (await world.allReduce(Float32Array.of(mine), { op: 'max' }))[0];
  }
  return times;
}

export const TIMING_TASKS: Record<string, RankTask> = {
  /** A single call (traced like any other). */
  async one(world, args: TimingArgs) {
    await runCollective(world, args.coll, args.algorithm, buffer(world, args), args.backend);
    return world.transport.clock.now;
  },

  /**
   * nccl-tests' timing, time-bounded: warm-up calls (at least `warmup` and `warmupMs`), a
   * barrier, then timed calls (at least `minIters` and `minMs`), each timed alone; each rank
   * reports its own statistics (the host takes the slowest rank's). The simulated time is taken
   * from one more call after a barrier, with every clock restarted at 0: back-to-back calls
   * overlap on the simulated clock (a root that only sends never waits), which would understate
   * one call's cost; one call suffices because the simulated clock does not depend on wall time.
   */
  async time(world, args: TimingArgs): Promise<TimingResult> {
    const b = { ...DEFAULT_BUDGET, ...args };
    const buf = buffer(world, args);
    const call = () => runCollective(world, args.coll, args.algorithm, buf.fill(1), args.backend);
    const warm = await timedLoop(world, call, Math.max(1, b.warmup), b.warmupMs, Math.max(1, b.warmup, b.maxIters));
    await world.barrier();
    const stats = summarize(await timedLoop(world, call, Math.max(1, b.minIters), b.minMs, b.maxIters));
    const res = { ...stats, firstMs: warm[0], simUs: 0 };
    if (args.sim === false) return res;
    await world.barrier();
    world.transport.clock.reset();
    await runCollective(world, args.coll, args.algorithm, buf, args.backend);
    return { ...res, simUs: world.transport.clock.now };
  },
};
