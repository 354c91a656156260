/**
 * One MPI process as one rank (docs/design.md#mpi-one-rank-per-process-two-backends-per-collective): MPI_Init_thread
 * (MPI_THREAD_MULTIPLE, since the waiting calls run on Deno's blocking threads), the world communicator of
 * comm/communicator.ts over the MPI wire, its process groups split off MPI_COMM_WORLD (`split`), and an orderly
 * shutdown (every send completed, a barrier, MPI_Finalize). Rank and world size come from MPI. Deno-only.
 */
import { Communicator } from '../communicator.ts';
import type { GroupFamily } from '../groups.ts';
import { Transport, type TransportOptions } from '../transport.ts';
import { check, intOut, MPI, mpi } from './libmpi.ts';
import { joinJob, leaveJob } from './job.ts';
import { MpiWire } from './wire.ts';

/** Environment variables a process launched by mpirun / mpiexec carries (MPICH's Hydra: PMI_*, PMI_ID and PMI_PORT under -pmi-port; Open MPI: OMPI_*). */
const LAUNCH_VARS = ['PMI_RANK', 'PMI_SIZE', 'PMI_ID', 'PMI_PORT', 'PMIX_RANK', 'OMPI_COMM_WORLD_SIZE'];

/** Whether this process was started by an MPI launcher. */
export function launchedByMpi(env: (k: string) => string | undefined = (k) => Deno.env.get(k)): boolean {
  return LAUNCH_VARS.some((k) => env(k) !== undefined);
}

export interface MpiWorld {
  rank: number;
  size: number;
  /** This process's rank among the processes on its node (MPI_COMM_TYPE_SHARED): picks its GPU there. */
  localRank: number;
  world: Communicator;
  transport: Transport;
  /**
   * Splits `families` off MPI_COMM_WORLD, one MPI_Comm_split each, so their groups can run MPI's
   * own collectives (docs/design.md#process-groups-are-mpi_comm_split-communicators). Collective: every rank calls it
   * with the same families in the same order, before those groups carry traffic. The world's own family (`world`) is
   * split by {@link mpiWorld}.
   * @throws Error for invalid families, families that differ between ranks, or an id split twice.
   */
  split(families: readonly GroupFamily[]): Promise<void>;
  /** MPI_Comm_split calls made so far on this rank (one per family, the world's included). */
  readonly splits: number;
  /** The MPI communicator split for group `id` on this rank (undefined when it has none). */
  splitComm(id: string): number | undefined;
  /** Completes every send, waits for every rank (MPI_Barrier), then MPI_Finalize. */
  finalize(): Promise<void>;
}

/**
 * Joins the MPI job this process belongs to.
 * @param how the command to show when the process was not started by mpirun.
 * @throws Error when the process was not launched by mpirun (naming `how`), when its PMI
 *   connection did not reach it (job.ts `pmiProblem`, naming `how`), when MPICH is not
 *   installed, when MPI grants less than MPI_THREAD_MULTIPLE, or when called twice.
 */
export async function mpiWorld(
  options: TransportOptions = {},
  how = 'mpirun -pmi-port -n 4 <command>',
): Promise<MpiWorld> {
  if (!launchedByMpi()) {
    throw new Error(`the MPI transport runs one rank per process under an MPI launcher; start it as: ${how}`);
  }
  const m = mpi();
  await joinJob(how);
  const rank = intOut((b) => m.MPI_Comm_rank(MPI.COMM_WORLD, b), 'MPI_Comm_rank');
  const size = intOut((b) => m.MPI_Comm_size(MPI.COMM_WORLD, b), 'MPI_Comm_size');
  // The node's processes (one shared-memory communicator each), ordered by world rank.
  const node = new Int32Array(1);
  check(
    await m.MPI_Comm_split_type(MPI.COMM_WORLD, MPI.COMM_TYPE_SHARED, rank, MPI.INFO_NULL, node),
    'MPI_Comm_split_type',
  );
  const localRank = intOut((b) => m.MPI_Comm_rank(node[0], b), 'MPI_Comm_rank');
  check(m.MPI_Comm_free(node), 'MPI_Comm_free');
  const wire = new MpiWire(rank, size);
  const transport = new Transport(rank, wire, options);
  const world = Communicator.world(transport);
  await wire.split([{ name: 'world', groups: [{ id: world.id, ranks: [...world.ranks] }] }]);
  return {
    rank,
    size,
    localRank,
    world,
    transport,
    split: (families) => wire.split(families),
    get splits() {
      return wire.splits;
    },
    splitComm: (id) => wire.splitComm(id),
    async finalize() {
      transport.close();
      await wire.flush();
      check(await m.MPI_Barrier(MPI.COMM_WORLD), 'MPI_Barrier');
      await leaveJob();
    },
  };
}
