/**
 * `mpirun -pmi-port -n N npm run bench -- comm --transport mpi [--tune FILE]`: the comm suite over real MPI
 * processes (docs/design.md#two-backends-per-call-mcr-dl). Every rank runs the same sweep: for each group size p (the
 * first p ranks; --worlds, default the MPI world), collective, candidate — each of this
 * project's algorithms over the MPI wire, and MPI's own collective (backend `mpi`) — and size S,
 * the bench's timing loop (comm/timing.ts); each statistic is the slowest rank's. Rank 0 prints
 * the tables and writes --json and --tune: the faster backend per (collective, p, S), MCR-DL's
 * tuning table (comm/tuning.ts), which `--comm-backend auto` reads.
 */
import { ALGORITHMS, type Backend } from '../comm/call_options.ts';
import { bandwidths } from '../comm/cost.ts';
import { TIMING_TASKS, type TimingResult } from '../comm/timing.ts';
import { buildTuning } from '../comm/tuning.ts';
import { mpiWorld } from '../comm/mpi/world.ts';
import { writeAtomic } from '../io/atomic.ts';
import { type CommBenchOptions, type CommBenchRow, commTable, sweepSizes } from './comm.ts';

/** The launch command the refusal outside mpirun shows. */
export const COMM_MPI_LAUNCH = 'mpirun -pmi-port -n 4 npm run bench -- comm --transport mpi';

/**
 * Runs the sweep on this MPI rank; rank 0 logs and writes the files. Returns the rows (every rank).
 * @throws Error outside mpirun, or for a group size above the MPI world.
 */
export async function benchCommMpi(
  o: CommBenchOptions & { worldsGiven: boolean; json?: string; tune?: string; nativeOnly?: boolean },
): Promise<CommBenchRow[]> {
  const w = await mpiWorld({ timeoutMs: 120_000, trace: false }, COMM_MPI_LAUNCH);
  try {
    const log = w.rank === 0 ? o.log : () => {};
    const worlds = o.worldsGiven ? o.worlds : [w.size];
    const over = worlds.find((p) => p > w.size);
    if (over) throw new Error(`--worlds: group size ${over} exceeds the MPI world of ${w.size} processes`);
    // Every rank splits every size's group up front: the split is collective over the world.
    await w.split(
      [...new Set(worlds)].map((p) => ({
        name: `bench${p}`,
        groups: [{ id: `bench${p}`, ranks: [...Array(p).keys()] }],
      })),
    );
    const rows: CommBenchRow[] = [];
    for (const p of worlds) {
      const g = w.rank < p ? w.world.newGroup([...Array(p).keys()], `bench${p}`) : null;
      const mine: CommBenchRow[] = [];
      for (const coll of o.collectives) {
        const candidates: { backend: Backend; algorithm: string }[] = [
          ...(o.nativeOnly ? [] : ALGORITHMS[coll].map((algorithm) => ({ backend: 'ours' as const, algorithm }))),
          { backend: 'mpi', algorithm: 'mpi' },
        ];
        for (const { backend, algorithm } of candidates) {
          for (const bytes of sweepSizes(o, coll, p)) {
            if (!g) continue;
            const args = { coll, algorithm: backend === 'ours' ? algorithm : undefined, backend, bytes, ...o.budget };
            const r = await TIMING_TASKS.time(g, { ...args, sim: false }) as TimingResult;
            // Each statistic the slowest rank's; f32 to match the wire's allReduce (µs-exact at these sizes).
            const worst = await g.allReduce(Float32Array.of(r.iters, r.min, r.median, r.p90, r.mean, r.firstMs), {
              op: 'max',
            });
            const [iters, min, median, p90, mean, firstMs] = worst;
            const stats = { iters, min, median, p90, mean, firstMs };
            const source = backend === 'mpi' ? { source: 'helper-thread' as const } : {};
            mine.push({ coll, algorithm, p, bytes, ...source, ...stats, ...bandwidths(coll, bytes, median, p) });
          }
        }
      }
      await w.world.barrier(); // ranks outside this group wait for it
      if (g) {
        log(
          `\nMPI group size ${p} (transport mpi; algorithm 'mpi' = MPI's own collective, on a Deno FFI helper thread)`,
        );
        log(commTable(mine, false));
      }
      rows.push(...mine);
    }
    if (w.rank === 0) await writeResults(rows, o);
    return rows;
  } finally {
    await w.finalize();
  }
}

async function writeResults(rows: CommBenchRow[], o: { json?: string; tune?: string; log: (s: string) => void }) {
  const enc = new TextEncoder();
  if (o.json) {
    const json = { suite: 'comm', transport: 'mpi', date: new Date().toISOString(), rows };
    await writeAtomic(o.json, enc.encode(JSON.stringify(json, null, 2) + '\n'));
  }
  if (o.tune) {
    const table = buildTuning(rows.map((r) => ({
      coll: r.coll,
      p: r.p,
      bytes: r.bytes,
      backend: r.algorithm === 'mpi' ? 'mpi' : 'ours',
      algorithm: r.algorithm === 'mpi' ? undefined : r.algorithm,
      ms: r.median,
    })));
    await writeAtomic(o.tune, enc.encode(JSON.stringify(table, null, 2) + '\n'));
    const mpiWins = table.entries.filter((e) => e.backend === 'mpi').length;
    o.log(`\ntuning table: ${o.tune} (MPI's own collective faster in ${mpiWins} of ${table.entries.length} cases)`);
  }
}
