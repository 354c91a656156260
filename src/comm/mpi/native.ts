/**
 * MPI's own collectives on one process group (docs/design.md#two-backends-per-call-mcr-dl): the `mpi` backend of a
 * Communicator call (call.ts), as MCR-DL mixes backends per call. Each group runs on its own MPI
 * communicator, made by MPI_Comm_split at world setup ({@link splitFamilies}): one split per
 * group family, called by every rank of the world in the same order, as picotron's
 * process_group_manager splits once per mesh dimension. Every call runs on a Deno blocking
 * thread (nonblocking FFI), so the event loop keeps polling the MPI wire meanwhile: a rank
 * inside a native collective still answers this project's algorithms on other groups.
 *
 * Why mixing cannot deadlock: each communicator orders its own collectives, and every rank of a
 * group issues the same calls on it in the same order (the Communicator's sequence numbers hold
 * ours to that; the native calls share them). Native calls on different groups run on different
 * threads (MPI_THREAD_MULTIPLE), so one waiting for its peers never blocks another; this
 * project's messages travel on MPI_COMM_WORLD under their own tags, apart from every
 * collective's traffic.
 */
import type { NumArray } from '../algorithms.ts';
import { checkFamilies, type GroupFamily } from '../groups.ts';
import type { NativeGroup, NativeOp } from '../wire.ts';
import { check, IN_PLACE, intOut, MPI, mpi } from './libmpi.ts';

const OPS: Record<NativeOp, number> = { sum: MPI.SUM, max: MPI.MAX, min: MPI.MIN };

function dtype(x: NumArray): number {
  return x instanceof Float32Array ? MPI.FLOAT : MPI.INT;
}

/** 32-bit FNV-1a of `s`: a fingerprint of the families every rank must agree on. */
function fnv(s: string): number {
  let h = 2166136261;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 16777619);
  return h | 0;
}

/**
 * Splits `parent` once per family, in order (MPI_Comm_split: color = the index of this rank's
 * group in the family, or MPI_UNDEFINED when it has none; key = its position in the group, so
 * the split communicator's ranks are the group ranks). Collective over `parent`: every rank must
 * call it with the same families, at a point where every rank gets to it (world setup, before any
 * traffic). Returns this rank's groups, each on its communicator.
 * @param rank this process's rank in `parent`; @param size the size of `parent`.
 * @throws Error from checkFamilies (the same on every rank, before any MPI call); when the ranks
 *   passed different families (found by one MPI_Allreduce of a fingerprint before any split, so
 *   every rank throws and none waits in a split its peers never make); when MPI's communicator
 *   disagrees with the group (size or rank).
 */
export async function splitFamilies(
  families: readonly GroupFamily[],
  rank: number,
  size: number,
  parent: number = MPI.COMM_WORLD,
): Promise<MpiGroup[]> {
  checkFamilies(families, size);
  const m = mpi(), h = fnv(JSON.stringify(families));
  const seen = Int32Array.of(h, -h);
  check(await m.MPI_Allreduce(IN_PLACE, seen, 2, MPI.INT, MPI.MAX, parent), 'MPI_Allreduce');
  if (seen[0] !== h || seen[1] !== -h) {
    throw new Error(
      `MPI_Comm_split: the ranks passed different group families (rank ${rank}: ${
        families.map((f) => f.name).join(', ')
      }); every rank of the world must split the same families in the same order`,
    );
  }
  const out: MpiGroup[] = [];
  for (const f of families) {
    const i = f.groups.findIndex((g) => g.ranks.includes(rank));
    const key = i < 0 ? 0 : f.groups[i].ranks.indexOf(rank), comm = new Int32Array(1);
    check(await m.MPI_Comm_split(parent, i < 0 ? MPI.UNDEFINED : i, key, comm), 'MPI_Comm_split');
    if (i < 0) continue; // MPI_COMM_NULL: this rank is in none of the family's groups
    const g = f.groups[i];
    const n = intOut((b) => m.MPI_Comm_size(comm[0], b), 'MPI_Comm_size');
    const r = intOut((b) => m.MPI_Comm_rank(comm[0], b), 'MPI_Comm_rank');
    if (n !== g.ranks.length || r !== key) {
      throw new Error(
        `MPI_Comm_split for '${g.id}': MPI made a communicator of ${n} ranks with this rank at ${r}, the group has ${g.ranks.length} with it at ${key}`,
      );
    }
    out.push(new MpiGroup(g.ranks, g.id, comm[0]));
  }
  return out;
}

export class MpiGroup implements NativeGroup {
  /**
   * @param ranks the group's world ranks in group-rank order; @param id its Communicator id;
   * @param comm its MPI communicator (from {@link splitFamilies}), whose ranks are the group ranks.
   */
  constructor(readonly ranks: readonly number[], readonly id: string, readonly comm: number) {}

  async allReduce(work: NumArray, op: NativeOp): Promise<void> {
    check(await mpi().MPI_Allreduce(IN_PLACE, work, work.length, dtype(work), OPS[op], this.comm), 'MPI_Allreduce');
  }

  async reduceScatter(input: NumArray, out: NumArray, op: NativeOp): Promise<void> {
    check(
      await mpi().MPI_Reduce_scatter_block(input, out, out.length, dtype(input), OPS[op], this.comm),
      'MPI_Reduce_scatter_block',
    );
  }

  async allGather(input: NumArray, out: NumArray): Promise<void> {
    const t = dtype(input);
    check(await mpi().MPI_Allgather(input, input.length, t, out, input.length, t, this.comm), 'MPI_Allgather');
  }

  async broadcast(work: NumArray, root: number): Promise<void> {
    check(await mpi().MPI_Bcast(work, work.length, dtype(work), root, this.comm), 'MPI_Bcast');
  }

  async reduce(input: NumArray, out: NumArray, root: number, op: NativeOp): Promise<void> {
    check(await mpi().MPI_Reduce(input, out, input.length, dtype(input), OPS[op], root, this.comm), 'MPI_Reduce');
  }

  async allToAll(input: NumArray, out: NumArray): Promise<void> {
    const t = dtype(input), n = input.length / this.ranks.length;
    check(await mpi().MPI_Alltoall(input, n, t, out, n, t, this.comm), 'MPI_Alltoall');
  }

  async barrier(): Promise<void> {
    check(await mpi().MPI_Barrier(this.comm), 'MPI_Barrier');
  }
}
