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
import { parseArgs } from 'node:util';
import { ALGORITHMS } from '../comm/call_options.ts';
import { World } from '../comm/launch.ts';
import { NetworkModel } from '../comm/network.ts';
import { bandwidths, predictUs, type SizedCollective } from '../comm/cost.ts';
import type { TimingResult } from '../comm/timing.ts';
import { writeAtomic } from '../io/atomic.ts';

export const COLLECTIVES: SizedCollective[] = [
  'allReduce',
  'reduceScatter',
  'allGather',
  'broadcast',
  'reduce',
  'allToAll',
];

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
  log: (line: string) => void;
}

export interface CommBenchRow {
  coll: SizedCollective;
  algorithm: string;
  p: number;
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
  for (const p of o.worlds) {
    const world = await World.launch({
      size: p,
      url: new URL('../../workers/rank.worker.ts', import.meta.url),
      net: net?.spec ?? null,
      trace: false,
      timeoutMs: 60_000,
      runTimeoutMs: 600_000,
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
            const row: CommBenchRow = { coll, algorithm, p, bytes, iters, ms, ...bandwidths(coll, bytes, ms, p) };
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
    o.log(`\nworld size ${p}${net ? ` · network ${net}` : ''}`);
    o.log(commTable(mine, !!net));
    rows.push(...mine);
  }
  return rows;
}

function fmtBytes(b: number): string {
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

/** `64MiB`, `4KiB`, `1M`, `4096` → bytes. @throws Error naming the flag and the accepted forms. */
export function parseBytes(text: string, flag: string): number {
  const m = /^(\d+(?:\.\d+)?)\s*(B|K|KB|KiB|M|MB|MiB|G|GiB)?$/i.exec(text.trim());
  if (!m) throw new Error(`${flag} expects a size like 4, 4KiB or 64MiB, got '${text}'`);
  const unit = (m[2] ?? 'B').toUpperCase()[0];
  const v = Math.round(Number(m[1]) * (unit === 'K' ? 1024 : unit === 'M' ? 1 << 20 : unit === 'G' ? 1 << 30 : 1));
  if (v < 4) throw new Error(`${flag} must be at least 4 bytes (one f32), got '${text}'`);
  return v;
}

export const COMM_HELP = `Usage: npm run bench -- comm [options]

Options:
  --worlds LIST       world sizes (default 2,4,8; 1–16 each)
  --min-bytes SIZE    smallest S (default 4)
  --max-bytes SIZE    largest S (default 8MiB, about 2 min on 2 cores; the full range: 64MiB)
  --step N            size multiplier between rows (default 8)
  --ops LIST          collectives (default ${COLLECTIVES.join(',')})
  --iters N           timed iterations per size (default: 2–10, about 4 MiB moved)
  --net SPEC          network model for simulated time vs α-β prediction, e.g.
                      'intra=300GB/s,1us;inter=25GB/s,5us;node=4' or nvlink-ib, pcie-eth, ideal
  --json FILE         also write the rows as JSON to FILE
  --transport T       workers (default: Web Workers in this process) or mpi (one rank per
                      process; start under mpirun: ${'mpirun -n 4 npm run bench -- comm --transport mpi'};
                      every algorithm and MPI's own collective; --worlds defaults to the MPI world)
  --tune FILE         with --transport mpi: write the faster backend per (collective, group
                      size, S) to FILE, the table --comm-backend auto reads
  -h, --help          this text`;

/** Parses the comm suite's flags. @throws Error naming a bad flag value and what is allowed. */
export function parseCommArgs(
  argv: string[],
): CommBenchOptions & {
  json?: string;
  help: boolean;
  transport: 'workers' | 'mpi';
  tune?: string;
  worldsGiven: boolean;
} {
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      options: {
        worlds: { type: 'string' },
        transport: { type: 'string', default: 'workers' },
        tune: { type: 'string' },
        'min-bytes': { type: 'string', default: '4' },
        'max-bytes': { type: 'string', default: '8MiB' },
        step: { type: 'string', default: '8' },
        ops: { type: 'string', default: COLLECTIVES.join(',') },
        iters: { type: 'string' },
        net: { type: 'string' },
        json: { type: 'string' },
        help: { type: 'boolean', short: 'h', default: false },
      },
      strict: true,
    });
  } catch (e) {
    throw new Error(`${(e as Error).message.split('\n')[0]} (see --help)`);
  }
  const v = parsed.values;
  const worlds = (v.worlds ?? '2,4,8').split(',').map(Number);
  if (!worlds.length || worlds.some((n) => !Number.isInteger(n) || n < 1 || n > 16)) {
    throw new Error(`--worlds expects comma-separated sizes in 1–16, got '${v.worlds}'`);
  }
  if (v.transport !== 'workers' && v.transport !== 'mpi') {
    throw new Error(`--transport expects workers or mpi, got '${v.transport}'`);
  }
  if (v.tune !== undefined && v.transport !== 'mpi') {
    throw new Error("--tune compares MPI's own collectives with ours and needs --transport mpi");
  }
  const collectives = v.ops.split(',').map((s) => s.trim()) as SizedCollective[];
  for (const c of collectives) {
    if (!COLLECTIVES.includes(c)) {
      throw new Error(`--ops: unknown collective '${c}'; allowed: ${COLLECTIVES.join(', ')}`);
    }
  }
  const step = Number(v.step);
  if (!Number.isInteger(step) || step < 2) throw new Error(`--step must be an integer ≥ 2, got '${v.step}'`);
  const iters = v.iters === undefined ? undefined : Number(v.iters);
  if (iters !== undefined && (!Number.isInteger(iters) || iters < 1)) {
    throw new Error(`--iters must be a positive integer, got '${v.iters}'`);
  }
  const minBytes = parseBytes(v['min-bytes'], '--min-bytes'), maxBytes = parseBytes(v['max-bytes'], '--max-bytes');
  if (maxBytes < minBytes) throw new Error(`--max-bytes (${maxBytes}) is below --min-bytes (${minBytes})`);
  if (v.net !== undefined) NetworkModel.parse(v.net);
  return {
    worlds,
    minBytes,
    maxBytes,
    step,
    collectives,
    iters,
    net: v.net,
    json: v.json,
    help: v.help,
    transport: v.transport,
    tune: v.tune,
    worldsGiven: v.worlds !== undefined,
    log: console.log,
  };
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
  console.log(`\n${rows.length} rows in ${((performance.now() - t0) / 1e3).toFixed(1)} s`);
  const json = JSON.stringify({ suite: 'comm', net: o.net ?? null, date: new Date().toISOString(), rows }, null, 2);
  if (o.json) await writeAtomic(o.json, new TextEncoder().encode(json + '\n'));
  return 0;
}
