/**
 * `npm run bench -- comm [flags]`: the collective layer's nccl-tests. For each collective and
 * algorithm, each world size (workers/rank.worker.ts ranks, one world launched per size) and
 * each size S: warm-up calls, then calls timed one by one for a minimum time and count
 * (comm/timing.ts), printed as min / median / p90 µs per call (each the slowest rank's), with
 * algbw = S / median and busbw = algbw × nccl-tests' factor (src/comm/cost.ts). With `--net`,
 * the simulated time per call on the modelled network beside the α-β prediction of the
 * algorithm's formula (over the slowest link the world uses).
 *
 * Sizes run from --min-bytes to --max-bytes in ×--step steps; the chunked collectives
 * (reduceScatter, allGather, allToAll) round S up to a multiple of 4·p bytes, as nccl-tests
 * rounds counts to the rank count.
 */
import { ALGORITHMS } from '../comm/call_options.ts';
import { World } from '../comm/launch.ts';
import { NetworkModel } from '../comm/network.ts';
import { bandwidths, predictUs, type SizedCollective } from '../comm/cost.ts';
import type { CallStats, TimingBudget, TimingResult } from '../comm/timing.ts';
import { writeAtomic } from '../io/atomic.ts';
import { DATA_PLANES, type DataPlane, regionBytesFor } from '../comm/data_plane.ts';
import { planeTable } from './comm_planes.ts';
import { COMM_HELP, parseCommArgs } from './comm_args.ts';

export { COLLECTIVES, COMM_HELP, parseBytes, parseCommArgs } from './comm_args.ts';

export interface CommBenchOptions {
  worlds: number[];
  minBytes: number;
  maxBytes: number;
  /** Size multiplier between rows (≥ 2). */
  step: number;
  collectives: SizedCollective[];
  /** Warm-up and timed calls per row (comm/timing.ts DEFAULT_BUDGET, QUICK_BUDGET). */
  budget: TimingBudget;
  /** Network model text (parseNetwork) for the simulated columns. */
  net?: string;
  /**
   * Data planes of the worker worlds (docs/design.md#the-shared-data-plane-of-worker-ranks), each timed in turn;
   * default both.
   */
  planes?: DataPlane[];
  /** Only these algorithms of each collective (default all of ALGORITHMS[coll]). */
  algorithms?: string[];
  log: (line: string) => void;
}

/**
 * Where an MPI row's calls came from: a C loop (mpi_ref.ts), a loop of synchronous Deno FFI
 * calls (mpi_sync_loop.ts), or this project's `mpi` backend, which calls MPI on a Deno FFI
 * helper thread (comm/mpi/native.ts).
 */
export type MpiSource = 'c-loop' | 'ffi-sync' | 'helper-thread';

/** One row: wall ms per call, each statistic the slowest rank's (CallStats: min, median, p90, mean, iters). */
export interface CommBenchRow extends CallStats {
  coll: SizedCollective;
  algorithm: string;
  p: number;
  /** Worker worlds: the data plane the row ran on. */
  plane?: DataPlane;
  /** MPI's own collective: how it was called. */
  source?: MpiSource;
  /** S, bytes. */
  bytes: number;
  /** The first warm-up call, ms (slowest rank): a cold call, before the code paths warmed up. */
  firstMs?: number;
  /** algbw and busbw from the median, GB/s. */
  algbw: number;
  busbw: number;
  /** With a network model: simulated µs per call (slowest rank) and the α-β formula's µs. */
  simUs?: number;
  predictedUs?: number;
  simBusbw?: number;
}

/**
 * The sizes S of one (collective, world size p) sweep, bytes: --min-bytes to --max-bytes in
 * ×step steps (the chunked collectives round S up to a multiple of 4·p bytes).
 */
export function sweepSizes(
  o: Pick<CommBenchOptions, 'minBytes' | 'maxBytes' | 'step'>,
  coll: SizedCollective,
  p: number,
): number[] {
  const out = [];
  for (let s = o.minBytes; s <= o.maxBytes; s *= o.step) {
    const chunked = coll === 'reduceScatter' || coll === 'allGather' || coll === 'allToAll';
    out.push(chunked ? Math.ceil(s / (4 * p)) * 4 * p : Math.ceil(s / 4) * 4);
  }
  return out;
}

/** Each statistic's worst (largest) value over the ranks: the slowest rank's min, median, … */
export function slowestRank(res: (CallStats & { firstMs: number })[]): CallStats & { firstMs: number } {
  const worst = (k: keyof CallStats | 'firstMs') => Math.max(...res.map((r) => r[k]));
  return {
    iters: worst('iters'),
    min: worst('min'),
    median: worst('median'),
    p90: worst('p90'),
    mean: worst('mean'),
    firstMs: worst('firstMs'),
  };
}

/** Runs the sweep; logs one table per world size and returns every row. */
export async function benchComm(o: CommBenchOptions): Promise<CommBenchRow[]> {
  const net = o.net ? NetworkModel.parse(o.net) : null;
  const rows: CommBenchRow[] = [];
  for (const [p, plane] of o.worlds.flatMap((p) => (o.planes ?? DATA_PLANES).map((d) => [p, d] as const))) {
    const world = await World.launch({
      size: p,
      url: new URL('../../workers/rank.worker.ts', import.meta.url),
      net: net?.spec ?? null,
      trace: false,
      timeoutMs: 60_000,
      runTimeoutMs: 600_000,
      dataPlane: plane,
      regionBytes: regionBytesFor(o.maxBytes), // a direct algorithm's message is the whole buffer
    });
    // The α-β prediction uses the slowest link this world has: inter once it spans nodes.
    const link = net ? net.spec[p > net.spec.ranksPerNode ? 'inter' : 'intra'] : null;
    const mine: CommBenchRow[] = [];
    try {
      for (const coll of o.collectives) {
        for (const algorithm of ALGORITHMS[coll].filter((a) => !o.algorithms || o.algorithms.includes(a))) {
          for (const bytes of sweepSizes(o, coll, p)) {
            const res = await world.run<TimingResult>('time', { coll, algorithm, bytes, ...o.budget, sim: !!net });
            const stats = slowestRank(res);
            const row: CommBenchRow = {
              coll,
              algorithm,
              p,
              plane,
              bytes,
              ...stats,
              ...bandwidths(coll, bytes, stats.median, p),
            };
            if (link) {
              row.simUs = Math.max(...res.map((r) => r.simUs));
              row.predictedUs = predictUs(coll, algorithm, bytes, p, link);
              row.simBusbw = bandwidths(coll, bytes, row.simUs / 1e3, p).busbw;
            }
            mine.push(row);
          }
        }
      }
    } finally {
      await world.shutdown();
    }
    o.log(`\nworld size ${p} · ${plane} plane${net ? ` · network ${net}` : ''}`);
    o.log(commTable(mine, !!net));
    rows.push(...mine);
  }
  return rows;
}

/** `4 KiB`, `16 MiB`: a byte count as the tables show it. */
export function fmtBytes(b: number): string {
  return b >= 1 << 20 ? `${+(b / (1 << 20)).toFixed(2)} MiB` : b >= 1024 ? `${+(b / 1024).toFixed(2)} KiB` : `${b} B`;
}

/** A number as the tables show it: 3 significant digits below 100, whole above. */
export const f = (x: number) => (x >= 100 ? x.toFixed(0) : x >= 1 ? x.toFixed(2) : x.toPrecision(3));

/** ms → µs as the tables show it. */
export const us = (ms: number) => f(ms * 1e3);

/**
 * nccl-tests-like table: size, collective, algorithm, timed calls, min / median / p90 µs per
 * call (each the slowest rank's), algbw and busbw from the median (+ simulated columns).
 */
export function commTable(rows: CommBenchRow[], withNet: boolean): string {
  const header = [
    'size',
    'collective',
    'algorithm',
    'calls',
    'min µs',
    'median µs',
    'p90 µs',
    'algbw GB/s',
    'busbw GB/s',
  ];
  if (withNet) header.push('sim µs', 'α-β µs', 'sim/α-β', 'sim busbw');
  const cells = rows.map((r) => {
    const c = [
      fmtBytes(r.bytes),
      r.coll,
      r.algorithm,
      String(r.iters),
      us(r.min),
      us(r.median),
      us(r.p90),
      f(r.algbw),
      f(r.busbw),
    ];
    if (withNet) {
      const ratio = r.predictedUs ? (r.simUs! / r.predictedUs).toFixed(3) : '-';
      c.push(f(r.simUs!), f(r.predictedUs!), ratio, f(r.simBusbw!));
    }
    return c;
  });
  const widths = header.map((h, i) => Math.max(h.length, ...cells.map((r) => r[i].length)));
  const line = (c: string[]) => c.map((x, i) => (i < 3 ? x.padEnd(widths[i]) : x.padStart(widths[i]))).join('  ');
  return [line(header), widths.map((w) => '-'.repeat(w)).join('  '), ...cells.map(line)].join('\n');
}

/**
 * The `comm` suite's entry point (it parses its own flags): returns the exit code. `entry` is the
 * bench command's module, which mpirun re-runs for the MPI helper-thread rows (mpi_ref.ts).
 */
export async function commMain(argv: string[], entry: URL): Promise<number> {
  let o;
  try {
    o = parseCommArgs(argv);
  } catch (e) {
    console.error(`bench comm: ${(e as Error).message}`);
    return 2;
  }
  if (o.help) {
    console.log(COMM_HELP);
    return 0;
  }
  if (o.transport === 'mpi') {
    await (await import('./comm_mpi.ts')).benchCommMpi(o);
    return 0;
  }
  const b = o.budget;
  console.log(
    `== comm: collectives × algorithms, S = ${fmtBytes(o.minBytes)} … ${fmtBytes(o.maxBytes)}, worlds ${
      o.worlds.join(', ')
    }\n   per row: ≥ ${b.warmup} warm-up calls and ≥ ${b.warmupMs} ms of them, then ≥ ${b.minIters} timed calls` +
      ` and ≥ ${b.minMs} ms of them (≤ ${b.maxIters}); Deno ${Deno.version.deno}, ${navigator.hardwareConcurrency}` +
      ` CPUs, load average ${loadAverage()}`,
  );
  const t0 = performance.now();
  const rows = await benchComm(o);
  if (o.planes!.length > 1) console.log(`\nshared vs message plane (median µs per call)\n${planeTable(rows)}`);
  const { mpiComparison } = await import('./mpi_ref.ts');
  const mpi = o.noMpi ? [] : await mpiComparison(o, rows, entry);
  if (o.noMpi) console.log('\nMPICH comparison: skipped (--no-mpi)');
  const n = rows.length + mpi.length;
  console.log(`\n${n} rows in ${((performance.now() - t0) / 1e3).toFixed(1)} s, load average ${loadAverage()}`);
  const json = JSON.stringify(
    { suite: 'comm', net: o.net ?? null, date: new Date().toISOString(), budget: b, rows: [...rows, ...mpi] },
    null,
    2,
  );
  if (o.json) await writeAtomic(o.json, new TextEncoder().encode(json + '\n'));
  return 0;
}

/** The 1-minute load average (Deno.loadavg), or '?' where the runtime cannot tell. */
export function loadAverage(): string {
  try {
    return Deno.loadavg()[0].toFixed(2);
  } catch {
    return '?';
  }
}
