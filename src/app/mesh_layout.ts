/**
 * Where each rank of a [dp, pp, cp, tp] mesh sits in the 3-D mesh view and which links it
 * draws: tp along x (neighbours in a TP group touch), cp as blocks further along x, pp up the
 * y axis (a pipeline reads bottom to top) and dp along z. Pure functions: tested in Deno.
 */
import { DeviceMesh, type MeshDim } from '../comm/mesh.ts';

/** One rank's cube: world-space centre and the group it is coloured by. */
export interface RankCube {
  rank: number;
  position: [number, number, number];
  /** Index of the rank's group along the colouring dimension, 0 … groups−1. */
  group: number;
}

/** A drawable link between two ranks that talk within a group. */
export interface MeshLink {
  a: number;
  b: number;
  dim: MeshDim;
}

const SPACING = 1.6;
const CP_GAP = 0.8;

/**
 * Cube centres for every rank, centred on the origin.
 * @param colourBy the dimension whose groups give the colours.
 * @throws Error from DeviceMesh when a size is not a positive integer.
 */
export function layoutMesh(shape: readonly [number, number, number, number], colourBy: MeshDim): RankCube[] {
  const world = shape.reduce((a, b) => a * b, 1);
  const mesh = new DeviceMesh(shape, world);
  const [dp, pp, cp, tp] = shape;
  const width = cp * tp * SPACING + (cp - 1) * CP_GAP;
  const groups = mesh.groups(colourBy);
  const groupOf = new Map<number, number>();
  groups.forEach((g, i) => g.forEach((r) => groupOf.set(r, i)));
  return [...Array(world).keys()].map((rank) => {
    const c = mesh.coords(rank);
    const x = (c.cp * tp + c.tp) * SPACING + c.cp * CP_GAP - width / 2 + SPACING / 2;
    const y = (c.pp - (pp - 1) / 2) * SPACING;
    const z = (c.dp - (dp - 1) / 2) * SPACING;
    return { rank, position: [x, y, z], group: groupOf.get(rank)! };
  });
}

/**
 * The links a ring collective uses inside every group along `dims`: consecutive members and the
 * wrap-around (one link for a group of two, none for one). Pipeline groups are chains, not
 * rings: stage i talks to stage i+1 only.
 */
export function meshLinks(shape: readonly [number, number, number, number], dims: readonly MeshDim[]): MeshLink[] {
  const world = shape.reduce((a, b) => a * b, 1);
  const mesh = new DeviceMesh(shape, world);
  const out: MeshLink[] = [];
  for (const dim of dims) {
    for (const g of mesh.groups(dim)) {
      for (let i = 0; i + 1 < g.length; i++) out.push({ a: g[i], b: g[i + 1], dim });
      if (dim !== 'pp' && g.length > 2) out.push({ a: g[g.length - 1], b: g[0], dim });
    }
  }
  return out;
}

/** A distinct colour per group: evenly spaced hues, as linear RGB in [0, 1]. */
export function groupColour(group: number, groups: number): [number, number, number] {
  const h = (group / Math.max(1, groups)) * 6;
  const f = (n: number) => {
    const k = (n + h) % 6;
    return 0.85 - 0.65 * Math.max(0, Math.min(k, 4 - k, 1));
  };
  return [f(5), f(3), f(1)];
}
