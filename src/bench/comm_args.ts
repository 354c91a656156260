/**
 * The flags of `npm run bench -- comm` (comm.ts): the help text and the parser, which names a bad
 * value and what is allowed.
 */
import { parseCliArgs } from '../util/parse_cli.ts';
import { NetworkModel } from '../comm/network.ts';
import type { SizedCollective } from '../comm/cost.ts';
import { DATA_PLANES, type DataPlane } from '../comm/data_plane.ts';
import type { CommBenchOptions } from './comm.ts';
import { DEFAULT_BUDGET, QUICK_BUDGET, type TimingBudget } from '../comm/timing.ts';

export const COLLECTIVES: SizedCollective[] = [
  'allReduce',
  'reduceScatter',
  'allGather',
  'broadcast',
  'reduce',
  'allToAll',
];

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
  --max-bytes SIZE    largest S (default 8MiB; the full range: 64MiB); each row takes at least
                      --warmup-ms + --min-ms
  --step N            size multiplier between rows (default 8)
  --ops LIST          collectives (default ${COLLECTIVES.join(',')})
  --warmup N          warm-up calls per row, untimed (default ${DEFAULT_BUDGET.warmup}; at least 1)
  --warmup-ms MS      and at least this much warm-up time (default ${DEFAULT_BUDGET.warmupMs})
  --min-iters N       timed calls per row, at least (default ${DEFAULT_BUDGET.minIters})
  --min-ms MS         and at least this much timed time (default ${DEFAULT_BUDGET.minMs}); each call is
                      timed alone, and each row prints min / median / p90 µs per call
                      (the slowest rank's) and busbw from the median
  --max-iters N       stop a row after this many timed calls (default ${DEFAULT_BUDGET.maxIters})
  --quick             ${QUICK_BUDGET.warmup} warm-up call, ${QUICK_BUDGET.minIters} timed calls, no minimum time (tests; the numbers
                      are first-call costs, not steady state)
  --net SPEC          network model for simulated time vs α-β prediction, e.g.
                      'intra=300GB/s,1us;inter=25GB/s,5us;node=4' or nvlink-ib, pcie-eth, ideal
  --data-plane P      shared, message or both (default both): the worker worlds' data plane
                      (docs/design.md#the-shared-data-plane-of-worker-ranks), side by side;
                      with mpirun installed, MPICH's own collective runs at the same sizes and world sizes three ways: a C loop
                      (built with mpicc at bench time), a loop of synchronous Deno FFI calls,
                      and through this project's FFI helper thread (--transport mpi
                      --native-only); each size shows our time over MPI's
  --no-mpi            skip the MPICH comparison
  --no-mpicc          MPICH comparison without the C loop
  --json FILE         also write the rows as JSON to FILE
  --transport T       workers (default: Web Workers in this process) or mpi (one rank per
                      process; start under mpirun: ${'mpirun -pmi-port -n 4 npm run bench -- comm --transport mpi'};
                      every algorithm and MPI's own collective; --worlds defaults to the MPI world)
  --tune FILE         with --transport mpi: write the faster backend per (collective, group
                      size, S) to FILE, the table --comm-backend auto reads
  --native-only       with --transport mpi: time MPI's own collectives only
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
  noMpi: boolean;
  noMpicc: boolean;
  nativeOnly: boolean;
} {
  let parsed;
  try {
    parsed = parseCliArgs({
      args: argv,
      options: {
        worlds: { type: 'string' },
        transport: { type: 'string', default: 'workers' },
        tune: { type: 'string' },
        'min-bytes': { type: 'string', default: '4' },
        'max-bytes': { type: 'string', default: '8MiB' },
        step: { type: 'string', default: '8' },
        ops: { type: 'string', default: COLLECTIVES.join(',') },
        warmup: { type: 'string' },
        'warmup-ms': { type: 'string' },
        'min-iters': { type: 'string' },
        'min-ms': { type: 'string' },
        'max-iters': { type: 'string' },
        quick: { type: 'boolean', default: false },
        net: { type: 'string' },
        json: { type: 'string' },
        'data-plane': { type: 'string', default: 'both' },
        'no-mpi': { type: 'boolean', default: false },
        'no-mpicc': { type: 'boolean', default: false },
        'native-only': { type: 'boolean', default: false },
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
  const budget = parseBudget(v);
  const minBytes = parseBytes(v['min-bytes'], '--min-bytes'), maxBytes = parseBytes(v['max-bytes'], '--max-bytes');
  if (maxBytes < minBytes) throw new Error(`--max-bytes (${maxBytes}) is below --min-bytes (${minBytes})`);
  if (v.net !== undefined) NetworkModel.parse(v.net);
  const dp = v['data-plane'];
  if (dp !== 'both' && !DATA_PLANES.includes(dp as DataPlane)) {
    throw new Error(`--data-plane expects shared, message or both, got '${dp}'`);
  }
  return {
    worlds,
    minBytes,
    maxBytes,
    step,
    collectives,
    budget,
    net: v.net,
    json: v.json,
    help: v.help,
    transport: v.transport,
    tune: v.tune,
    worldsGiven: v.worlds !== undefined,
    planes: dp === 'both' ? [...DATA_PLANES] : [dp as DataPlane],
    noMpi: v['no-mpi'],
    noMpicc: v['no-mpicc'],
    nativeOnly: v['native-only'],
    log: console.log,
  };
}

/**
 * The timing budget from --quick (the base) and the flags that override it.
 * @throws Error naming a flag whose value is not a whole number in its range.
 */
function parseBudget(v: Record<string, string | boolean | undefined>): TimingBudget {
  const b = { ...(v.quick ? QUICK_BUDGET : DEFAULT_BUDGET) };
  const flags: [string, keyof TimingBudget, number][] = [
    ['warmup', 'warmup', 1],
    ['warmup-ms', 'warmupMs', 0],
    ['min-iters', 'minIters', 1],
    ['min-ms', 'minMs', 0],
    ['max-iters', 'maxIters', 1],
  ];
  for (const [flag, key, least] of flags) {
    const text = v[flag];
    if (typeof text !== 'string') continue;
    const n = Number(text);
    if (!/^\d+$/.test(text.trim()) || n < least) {
      throw new Error(`--${flag} expects a whole number ≥ ${least}, got '${text}'`);
    }
    b[key] = n;
  }
  if (b.maxIters < b.minIters) {
    throw new Error(`--max-iters (${b.maxIters}) is below --min-iters (${b.minIters})`);
  }
  return b;
}
