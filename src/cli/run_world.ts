/**
 * Where a parallel run's ranks live (`--transport`; docs/design.md#training-over-mpi): Deno module workers in
 * this process (the default; launch.ts `World`), or one MPI process per rank under mpirun, each
 * running the host loop itself (comm/mpi/task_world.ts). Either way the CLI gets a world to
 * drive with run_host.ts `runParallel`, whether this process is the one that prints and writes
 * files, and how to end it. `--comm-backend` and `--comm-tuning` choose, per collective call,
 * this project's algorithms or MPI's own (comm/tuning.ts).
 */
import { z } from 'zod';
import { World } from '../comm/launch.ts';
import type { DataPlane } from '../comm/data_plane.ts';
import type { NetworkModel } from '../comm/network.ts';
import type { ChromeTrace } from '../comm/trace.ts';
import { parseTuning } from '../comm/tuning.ts';
import type { TaskWorld } from '../parallel/run/run_host.ts';
import { type ParallelPlan, planWorldSize } from '../parallel/plan/plan.ts';
import { rankWorkerUrl } from './worker_bundle.ts';

/** The CLI-only launch flags of a parallel run (not in PlanSchema: the browser has workers only). */
export const LaunchSchema = z.object({
  transport: z.enum(['workers', 'mpi']).default('workers').describe(
    'ranks as Deno workers in this process, or one MPI process each (start under mpirun -pmi-port -n <world size>)',
  ),
  commBackend: z.enum(['ours', 'mpi', 'auto']).default('ours').describe(
    "collectives: this project's algorithms, MPI's own, or the faster per call from --comm-tuning (mpi and auto need --transport mpi)",
  ),
  commTuning: z.string().min(1).optional().describe(
    'tuning table for --comm-backend auto (npm run bench -- comm --transport mpi --tune FILE)',
  ),
});
export type LaunchOptions = z.infer<typeof LaunchSchema>;

/** What config.json records of the launch: nothing for a worker run (as before), else the transport and backend. */
export function launchRecord(o: LaunchOptions): Record<string, unknown> {
  return o.transport === 'workers' ? {} : { transport: o.transport, commBackend: o.commBackend };
}

export interface RunWorld {
  world: TaskWorld & { chromeTrace(meta?: Record<string, unknown>): Promise<ChromeTrace> };
  /** Whether this process prints and writes the run's files (always with workers; rank 0 under MPI). */
  primary: boolean;
  /**
   * Workers: the data plane in use, and why when it fell back to MessagePorts
   * (docs/design.md#the-shared-data-plane-of-worker-ranks).
   */
  planeLine?: string;
  /** Under MPI: this process's rank on its node, which `--adapter local-rank` turns into its GPU's index. */
  localRank?: number;
  /** Ends the world (workers terminated, or MPI finalized). */
  close(): Promise<void>;
  /** Under MPI: reports `e` as this rank's and ends the whole job (comm/mpi/job.ts `abortJob`), so no rank waits on a dead peer. */
  abort?(e: unknown): Promise<never>;
}

/**
 * Checks the launch flags against each other before anything starts.
 * @throws Error for --comm-backend mpi|auto without --transport mpi, auto without a table, or a table without auto.
 */
export function checkLaunch(o: LaunchOptions): void {
  if (o.commBackend !== 'ours' && o.transport !== 'mpi') {
    throw new Error(`--comm-backend ${o.commBackend} runs MPI's own collectives and needs --transport mpi`);
  }
  if (o.commBackend === 'auto' && !o.commTuning) {
    throw new Error(
      '--comm-backend auto needs --comm-tuning FILE (write one with: mpirun -pmi-port -n N npm run bench -- comm --transport mpi --tune FILE)',
    );
  }
  if (o.commTuning && o.commBackend !== 'auto') throw new Error('--comm-tuning is read by --comm-backend auto only');
}

/**
 * Opens the world of `plan`'s dp·pp·cp·tp ranks the launch flags ask for. Under MPI every rank
 * splits every process group of the plan (parallel/plan/plan_groups.ts) off MPI_COMM_WORLD here,
 * before any task runs (docs/design.md#process-groups-are-mpi_comm_split-communicators).
 * @param how the command line to show when --transport mpi was not started by mpirun.
 * @throws Error when MPI is missing or not launching this process, when mpirun started another
 *   number of processes than the plan's world size, or for an unreadable tuning table.
 */
export async function openRunWorld(
  o: LaunchOptions,
  plan: ParallelPlan,
  net: NetworkModel | null,
  how: string,
  plane: { dataPlane?: DataPlane; regionBytes?: number } = {},
): Promise<RunWorld> {
  const size = planWorldSize(plan);
  if (o.transport === 'workers') {
    const world = await World.launch({
      size,
      url: await rankWorkerUrl(),
      net: net?.spec ?? null,
      trace: true,
      timeoutMs: 120_000,
      runTimeoutMs: 600_000,
      ...plane,
    });
    const mib = +(world.regionBytes / (1 << 20)).toFixed(2);
    const planeLine = world.planeNote ||
      (world.dataPlane === 'shared'
        ? `data plane: shared (SharedArrayBuffer rings of ${mib} MiB per pair of ranks)`
        : 'data plane: message (MessagePorts)');
    return { world, primary: true, planeLine, close: () => world.shutdown() };
  }
  const tuning = o.commTuning ? parseTuning(await Deno.readTextFile(o.commTuning), o.commTuning) : null;
  const { mpiWorld } = await import('../comm/mpi/world.ts');
  const { MpiTaskWorld } = await import('../comm/mpi/task_world.ts');
  const { parallelTasks } = await import('../parallel/run/run_tasks.ts');
  const { simActionUs } = await import('../perf/action_prices.ts');
  const { planGroupFamilies } = await import('../parallel/plan/plan_groups.ts');
  const { abortJob } = await import('../comm/mpi/job.ts');
  const m = await mpiWorld({ timeoutMs: 120_000, net, trace: true }, how);
  if (m.size !== size) {
    await m.finalize(); // every rank sees the same mismatch: end the job cleanly, then say why
    throw new Error(
      `--transport mpi: mpirun started ${m.size} processes; the plan's world size dp·pp·cp·tp is ${size}`,
    );
  }
  m.world.backend = o.commBackend;
  m.world.tuning = tuning;
  return {
    world: await MpiTaskWorld.open(m, parallelTasks(simActionUs), planGroupFamilies(plan)),
    primary: m.rank === 0,
    localRank: m.localRank,
    close: () => m.finalize(),
    abort: (e) => abortJob(String((e as Error)?.message ?? e)),
  };
}
