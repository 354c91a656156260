/**
 * Rank tasks that run one collective by name: `one` (a single call, for traces) and `time`
 * (nccl-tests' loop: warm-up calls, a barrier, then timed iterations) used by
 * `npm run bench -- comm` (src/bench/comm.ts). Runtime-neutral.
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

/** Arguments of the `one` and `time` tasks. */
export interface TimingArgs {
  coll: SizedCollective;
  algorithm?: string;
  /** `mpi`: MPI's own collective instead of `algorithm` (MPI transport only). */
  backend?: Backend;
  /** S in bytes (a multiple of 4 × world size for the chunked collectives). */
  bytes: number;
  /** `time`: timed iterations (default 5) and warm-up calls (default 1). */
  iters?: number;
  warmup?: number;
  /** `time`: also measure the simulated time of one call (default true). */
  sim?: boolean;
}

/** What `time` reports per rank. */
export interface TimingResult {
  /** Mean wall ms per call on this rank. */
  ms: number;
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

export const TIMING_TASKS: Record<string, RankTask> = {
  /** A single call (traced like any other). */
  async one(world, args: TimingArgs) {
    await runCollective(world, args.coll, args.algorithm, buffer(world, args), args.backend);
    return world.transport.clock.now;
  },

  /**
   * nccl-tests' timing: warm-up, barrier, then `iters` calls back to back; each rank reports its
   * mean wall time. The simulated time is taken from one more call after a barrier, with every
   * clock restarted at 0: back-to-back calls overlap on the simulated clock (a root that only
   * sends never waits), which would understate one call's cost; one call suffices because the
   * simulated clock does not depend on wall time.
   */
  async time(world, args: TimingArgs): Promise<TimingResult> {
    const buf = buffer(world, args);
    const iters = args.iters ?? 5;
    for (let i = 0; i < (args.warmup ?? 1); i++) {
      await runCollective(world, args.coll, args.algorithm, buf, args.backend);
    }
    await world.barrier();
    const t0 = performance.now();
    for (let i = 0; i < iters; i++) await runCollective(world, args.coll, args.algorithm, buf.fill(1), args.backend);
    const ms = (performance.now() - t0) / iters;
    if (args.sim === false) return { ms, simUs: 0 };
    await world.barrier();
    world.transport.clock.reset();
    await runCollective(world, args.coll, args.algorithm, buf, args.backend);
    return { ms, simUs: world.transport.clock.now };
  },
};
