/**
 * Process-group families (docs/design.md#process-groups-are-mpi_comm_split-communicators): the disjoint groups one
 * `MPI_Comm_split` makes, as picotron's process_group_manager splits the world once per mesh dimension. Every rank of
 * the world computes the same families before any traffic, so the MPI world can split them all collectively, in the
 * same order on every rank. Runtime-neutral: plain data and checks.
 */
import type { DeviceMesh, MeshDim } from './mesh.ts';

/** One process group: its Communicator id and its world ranks in group-rank order. */
export interface GroupSpec {
  id: string;
  ranks: number[];
}

/**
 * Disjoint process groups made by one collective split: a rank belongs to at most one of them
 * (color = that group's index, key = the rank's position in it), or to none.
 */
export interface GroupFamily {
  /** What the family is, for errors (`tp`, `tp/act`, `control`). */
  name: string;
  groups: GroupSpec[];
}

/**
 * The family of every group along mesh dimension `dim`, each named `dim[r0,r1,…]` as
 * DeviceMesh.communicator names it, or `dim[r0,r1,…]/lane` for a `lane` (data_parallel.ts
 * subGroup: the same ranks with their own call order, so their own MPI communicator).
 */
export function dimFamily(mesh: DeviceMesh, dim: MeshDim, lane = ''): GroupFamily {
  return family(dim, mesh.groups(dim), lane);
}

/** The family of `groups` named `prefix[r0,r1,…]`, or `prefix[r0,r1,…]/lane`. */
export function family(prefix: string, groups: readonly (readonly number[])[], lane = ''): GroupFamily {
  const suffix = lane ? `/${lane}` : '';
  return {
    name: `${prefix}${suffix}`,
    groups: groups.map((g) => ({ id: `${prefix}[${g.join(',')}]${suffix}`, ranks: [...g] })),
  };
}

/**
 * Checks that `families` can be split over a world of `worldSize` ranks.
 * @throws Error naming the family and what is wrong: a rank outside 0…worldSize−1, an empty
 *   group, a rank in two groups of one family, or one id used twice (ids key the communicators).
 */
export function checkFamilies(families: readonly GroupFamily[], worldSize: number): void {
  const ids = new Set<string>();
  for (const f of families) {
    const seen = new Set<number>();
    for (const g of f.groups) {
      if (!g.ranks.length) throw new Error(`group family '${f.name}': group '${g.id}' has no ranks`);
      for (const r of g.ranks) {
        if (!Number.isInteger(r) || r < 0 || r >= worldSize) {
          throw new Error(`group family '${f.name}': rank ${r} of '${g.id}' is outside the world 0…${worldSize - 1}`);
        }
        if (seen.has(r)) {
          throw new Error(
            `group family '${f.name}': rank ${r} is in two of its groups; one split gives each rank one group, so the groups must be disjoint`,
          );
        }
        seen.add(r);
      }
      if (ids.has(g.id)) throw new Error(`group family '${f.name}': group id '${g.id}' is split twice`);
      ids.add(g.id);
    }
  }
}
