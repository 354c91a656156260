/**
 * `npm run bench -- comm [flags]`: the collective layer's nccl-tests. For each collective and
 * algorithm, each world size (workers/rank.worker.ts ranks, one world launched per size) and
 * each size S: the wall time per call (the slowest rank's mean over the timed iterations),
 * algbw = S / t and busbw = algbw × nccl-tests' factor (src/comm/cost.ts). With `--net`, the
 * simulated time per call on the modelled network beside the α-β prediction of the algorithm's
 * formula (over the slowest link the world uses).
 *
 * Sizes run from --min-bytes to --max-bytes in ×--step steps; the chunked collectives
 * (reduceScatter, allGather, allToAll) round S up to a multiple of 4·p bytes, as nccl-tests
 * rounds counts to the rank count.
 */
import { ALGORITHMS } from '../comm/call_options.ts';
import { World } from '../comm/launch.ts';
import { NetworkModel } from '../comm/network.ts';
import { bandwidths, predictUs, type SizedCollective } from '../comm/cost.ts';
import type { TimingResult } from '../comm/timing.ts';
import { writeAtomic } from '../io/atomic.ts';
import { DATA_PLANES, type DataPlane, regionBytesFor } from '../comm/data_plane.ts';
import { mpiRows, mpiTable, planeTable } from './comm_planes.ts';
import { COMM_HELP, parseCommArgs } from './comm_args.ts';

export { COLLECTIVES, COMM_HELP, parseBytes, parseCommArgs } from './comm_args.ts';

export interface CommBenchOptions {
  worlds: number[];
  minBytes: number;
  maxBytes: number;
  /** Size multiplier between rows (≥ 2). */
  step: number;
  collectives: SizedCollective[];
  /** Timed iterations per size; default: enough for ≈ 4 MiB moved, 2…10. */
  iters?: number;
  /** Network model text (parseNetwork) for the simulated columns. */
  net?: string;
  /** Data planes of the worker worlds (docs/design.md §31), each timed in turn; default both. */
  planes?: DataPlane[];
  log: (line: string) => void;
}

export interface CommBenchRow {
  coll: SizedCollective;
  algorithm: string;
  p: number;
  /** Worker worlds: the data plane the row ran on. */
  plane?: DataPlane;
  /** S, bytes. */
  bytes: number;
  iters: number;
  /** Wall ms per call (slowest rank's mean). */
  ms: number;
  algbw: number;
  busbw: number;
  /** With a network model: simulated µs per call (slowest rank) and the α-β formula's µs. */
  simUs?: number;
  predictedUs?: number;
  simBusbw?: number;
}

/**
 * The sizes of one (collective, world size p) sweep: S from --min-bytes to --max-bytes in ×step
 * steps (the chunked collectives round S up to a multiple of 4·p bytes), with its timed
 * iterations (default: about 4 MiB moved, 2…10) and warm-up calls (none once S ≥ 1 MiB: smaller
 * sizes already warmed the code paths up, and a large warm-up call only costs time).
 */
export function sizeRows(
  o: Pick<CommBenchOptions, 'minBytes' | 'maxBytes' | 'step' | 'iters'>,
  coll: SizedCollective,
  p: number,
): { bytes: number; iters: number; warmup: number }[] {
  const out = [];
  for (let s = o.minBytes; s <= o.maxBytes; s *= o.step) {
    const chunked = coll === 'reduceScatter' || coll === 'allGather' || coll === 'allToAll';
    const bytes = chunked ? Math.ceil(s / (4 * p)) * 4 * p : Math.ceil(s / 4) * 4;
    const iters = o.iters ?? Math.max(2, Math.min(10, Math.round((4 << 20) / bytes)));
    out.push({ bytes, iters, warmup: bytes >= 1 << 20 ? 0 : 1 });
  }
  return out;
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
        for (const algorithm of ALGORITHMS[coll]) {
          for (const { bytes, iters, warmup } of sizeRows(o, coll, p)) {
            const res = await world.run<TimingResult>('time', { coll, algorithm, bytes, iters, warmup, sim: !!net });
            const ms = Math.max(...res.map((r) => r.ms));
            const row: CommBenchRow = {
              coll,
              algorithm,
              p,
              plane,
              bytes,
              iters,
              ms,
              ...bandwidths(coll, bytes, ms, p),
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

const f = (x: number) => (x >= 100 ? x.toFixed(0) : x >= 1 ? x.toFixed(2) : x.toPrecision(3));

/** nccl-tests-like table: size, collective, algorithm, time, algbw, busbw (+ simulated columns). */
export function commTable(rows: CommBenchRow[], withNet: boolean): string {
  const header = ['size', 'collective', 'algorithm', 'time ms', 'algbw GB/s', 'busbw GB/s'];
  if (withNet) header.push('sim µs', 'α-β µs', 'sim/α-β', 'sim busbw');
  const cells = rows.map((r) => {
    const c = [fmtBytes(r.bytes), r.coll, r.algorithm, f(r.ms), f(r.algbw), f(r.busbw)];
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

/** The `comm` suite's entry point (it parses its own flags): returns the exit code. */
export async function commMain(argv: string[]): Promise<number> {
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
  console.log(
    `== comm: collectives × algorithms, S = ${fmtBytes(o.minBytes)} … ${fmtBytes(o.maxBytes)}, worlds ${
      o.worlds.join(', ')
    }`,
  );
  const t0 = performance.now();
  const rows = await benchComm(o);
  if (o.planes!.length > 1) console.log(`\nshared vs message plane\n${planeTable(rows)}`);
  const mpi = o.noMpi ? 'skipped (--no-mpi)' : await mpiRows(o);
  if (typeof mpi === 'string') console.log(`\nMPICH comparison: ${mpi}`);
  else console.log(`\nMPICH's own collectives (mpirun -n p) vs ours\n${mpiTable(rows, mpi)}`);
  console.log(`\n${rows.length} rows in ${((performance.now() - t0) / 1e3).toFixed(1)} s`);
  const all = typeof mpi === 'string' ? rows : [...rows, ...mpi];
  const json = JSON.stringify(
    { suite: 'comm', net: o.net ?? null, date: new Date().toISOString(), rows: all },
    null,
    2,
  );
  if (o.json) await writeAtomic(o.json, new TextEncoder().encode(json + '\n'));
  return 0;
}
