/**
 * MPI's own collectives on one process group (docs/design.md §26): the `mpi` backend of a
 * Communicator call (call.ts), as MCR-DL mixes backends per call. Each group gets its own MPI
 * communicator, made on its first native call with MPI_Comm_create_group, which only the
 * group's members call — as only they call newGroup. Every call runs on a Deno blocking thread
 * (nonblocking FFI), so the event loop keeps polling the MPI wire meanwhile: a rank inside a
 * native collective still answers this project's algorithms on other groups.
 *
 * Why mixing cannot deadlock: each communicator orders its own collectives, and every rank of a
 * group issues the same calls on it in the same order (the Communicator's sequence numbers hold
 * ours to that; the native calls share them). Native calls on different groups run on different
 * threads (MPI_THREAD_MULTIPLE), so one waiting for its peers never blocks another; this
 * project's messages travel on MPI_COMM_WORLD under their own tags, apart from every
 * collective's traffic.
 */
import type { NumArray } from '../algorithms.ts';
import type { NativeGroup, NativeOp } from '../wire.ts';
import { check, IN_PLACE, intOut, MPI, mpi } from './libmpi.ts';

const OPS: Record<NativeOp, number> = { sum: MPI.SUM, max: MPI.MAX, min: MPI.MIN };

function dtype(x: NumArray): number {
  return x instanceof Float32Array ? MPI.FLOAT : MPI.INT;
}

/** A tag for MPI_Comm_create_group from the group's id (distinct ids rarely collide; MPI_TAG_UB ≥ 32767). */
function tagOf(id: string): number {
  let h = 2166136261;
  for (let i = 0; i < id.length; i++) h = Math.imul(h ^ id.charCodeAt(i), 16777619);
  return (h >>> 0) % 32768;
}

export class MpiGroup implements NativeGroup {
  private comm: Promise<number> | null = null;

  /** @param ranks the group's world ranks in group-rank order; @param id its Communicator id. */
  constructor(readonly ranks: readonly number[], readonly id: string, readonly parent: number = MPI.COMM_WORLD) {}

  /** The group's MPI communicator, created on first use (collective over the group's members only). */
  private handle(): Promise<number> {
    return this.comm ??= (async () => {
      const m = mpi();
      const world = intOut((b) => m.MPI_Comm_group(this.parent, b), 'MPI_Comm_group');
      const group = intOut(
        (b) => m.MPI_Group_incl(world, this.ranks.length, Int32Array.from(this.ranks), b),
        'MPI_Group_incl',
      );
      const out = new Int32Array(1);
      check(await m.MPI_Comm_create_group(this.parent, group, tagOf(this.id), out), 'MPI_Comm_create_group');
      for (const g of [world, group]) check(m.MPI_Group_free(Int32Array.of(g)), 'MPI_Group_free');
      return out[0];
    })();
  }

  async allReduce(work: NumArray, op: NativeOp): Promise<void> {
    const c = await this.handle();
    check(await mpi().MPI_Allreduce(IN_PLACE, work, work.length, dtype(work), OPS[op], c), 'MPI_Allreduce');
  }

  async reduceScatter(input: NumArray, out: NumArray, op: NativeOp): Promise<void> {
    const c = await this.handle();
    check(
      await mpi().MPI_Reduce_scatter_block(input, out, out.length, dtype(input), OPS[op], c),
      'MPI_Reduce_scatter_block',
    );
  }

  async allGather(input: NumArray, out: NumArray): Promise<void> {
    const c = await this.handle(), t = dtype(input);
    check(await mpi().MPI_Allgather(input, input.length, t, out, input.length, t, c), 'MPI_Allgather');
  }

  async broadcast(work: NumArray, root: number): Promise<void> {
    const c = await this.handle();
    check(await mpi().MPI_Bcast(work, work.length, dtype(work), root, c), 'MPI_Bcast');
  }

  async reduce(input: NumArray, out: NumArray, root: number, op: NativeOp): Promise<void> {
    const c = await this.handle();
    check(await mpi().MPI_Reduce(input, out, input.length, dtype(input), OPS[op], root, c), 'MPI_Reduce');
  }

  async allToAll(input: NumArray, out: NumArray): Promise<void> {
    const c = await this.handle(), t = dtype(input), n = input.length / this.ranks.length;
    check(await mpi().MPI_Alltoall(input, n, t, out, n, t, c), 'MPI_Alltoall');
  }

  async barrier(): Promise<void> {
    check(await mpi().MPI_Barrier(await this.handle()), 'MPI_Barrier');
  }
}
