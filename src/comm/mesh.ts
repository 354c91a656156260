/**
 * `DeviceMesh`: the 4-D grid [dp, pp, cp, tp] every parallel plan draws its groups from
 * (docs/design.md#ranks-and-the-collective-layer), laid out as in picotron's process_group_manager:
 *
 *   rank = ((dp_i · pp + pp_i) · cp + cp_i) · tp + tp_i
 *
 * so tp is innermost (neighbouring ranks share a TP group) and dp outermost. A group along a
 * dimension is the set of ranks that agree on every other coordinate, in order of that
 * dimension's index. Pure arithmetic: no messages; {@link DeviceMesh.communicator} turns a
 * group into a {@link Communicator}.
 */
import type { Communicator } from './communicator.ts';

export type MeshDim = 'dp' | 'pp' | 'cp' | 'tp';
export const MESH_DIMS: readonly MeshDim[] = ['dp', 'pp', 'cp', 'tp'];
export type MeshCoords = Record<MeshDim, number>;

export class DeviceMesh {
  /** Sizes in the order [dp, pp, cp, tp]. */
  readonly shape: readonly [number, number, number, number];
  readonly worldSize: number;
  /** World rank this mesh view belongs to. */
  readonly rank: number;

  /**
   * `shape` as [dp, pp, cp, tp] or a record; `worldSize` must equal the product of the sizes.
   * Throws "DeviceMesh: dp×pp×cp×tp = 2×2×1×2 = 8 but the world has 6 ranks" on a mismatch,
   * and on sizes that are not positive integers or a rank outside the world.
   */
  constructor(shape: readonly number[] | MeshCoords, worldSize: number, rank = 0) {
    const s = Array.isArray(shape) ? shape : MESH_DIMS.map((d) => (shape as MeshCoords)[d]);
    if (s.length !== 4 || s.some((n) => !Number.isInteger(n) || n < 1)) {
      throw new Error(`DeviceMesh: shape [${s}] must be 4 positive integers [dp, pp, cp, tp]`);
    }
    const prod = s[0] * s[1] * s[2] * s[3];
    if (prod !== worldSize) {
      throw new Error(`DeviceMesh: dp×pp×cp×tp = ${s.join('×')} = ${prod} but the world has ${worldSize} ranks`);
    }
    if (!Number.isInteger(rank) || rank < 0 || rank >= worldSize) {
      throw new Error(`DeviceMesh: rank ${rank} is outside a world of ${worldSize}`);
    }
    this.shape = [s[0], s[1], s[2], s[3]];
    this.worldSize = worldSize;
    this.rank = rank;
  }

  /** Size of one dimension. */
  size(dim: MeshDim): number {
    return this.shape[dimIndex(dim)];
  }

  /** Coordinates of `rank` (default: this mesh's rank). */
  coords(rank = this.rank): MeshCoords {
    if (!Number.isInteger(rank) || rank < 0 || rank >= this.worldSize) throw new Error(`DeviceMesh: no rank ${rank}`);
    const [, pp, cp, tp] = this.shape;
    return {
      tp: rank % tp,
      cp: Math.floor(rank / tp) % cp,
      pp: Math.floor(rank / (tp * cp)) % pp,
      dp: Math.floor(rank / (tp * cp * pp)),
    };
  }

  /** World rank at `c`; throws on a coordinate out of range. */
  rankOf(c: MeshCoords): number {
    for (const d of MESH_DIMS) {
      if (!Number.isInteger(c[d]) || c[d] < 0 || c[d] >= this.size(d)) {
        throw new Error(`DeviceMesh: ${d}=${c[d]} is outside 0…${this.size(d) - 1}`);
      }
    }
    const [, pp, cp, tp] = this.shape;
    return ((c.dp * pp + c.pp) * cp + c.cp) * tp + c.tp;
  }

  /** World ranks of `rank`'s group along `dim` (default: this mesh's rank), ordered by that coordinate. */
  group(dim: MeshDim, rank = this.rank): number[] {
    const c = this.coords(rank);
    return [...Array(this.size(dim)).keys()].map((i) => this.rankOf({ ...c, [dim]: i }));
  }

  /** Every group along `dim`, each ordered by that coordinate, groups in order of their first rank. */
  groups(dim: MeshDim): number[][] {
    const seen = new Set<number>();
    const out: number[][] = [];
    for (let r = 0; r < this.worldSize; r++) {
      if (seen.has(r)) continue;
      const g = this.group(dim, r);
      g.forEach((x) => seen.add(x));
      out.push(g);
    }
    return out;
  }

  /** A communicator over this rank's group along `dim`, id `<dim>[r0,r1,…]`. */
  communicator(world: Communicator, dim: MeshDim): Communicator {
    const g = this.group(dim);
    return world.newGroup(g, `${dim}[${g.join(',')}]`);
  }
}

function dimIndex(dim: MeshDim): number {
  const i = MESH_DIMS.indexOf(dim);
  if (i < 0) throw new Error(`DeviceMesh: unknown dimension '${dim}' (dp, pp, cp, tp)`);
  return i;
}
