/**
 * How the FlashAttention kernels (flash_attention.ts) are sized for an adapter: the tiles of the
 * GPU path, the rows a CPU adapter streams per dispatch under lavapipe's loop limit, the
 * subgroup variant's gate, and the hooks tests and benchmarks use to force each
 * (docs/design.md#kernels-and-their-equations).
 */
import type { Gpu } from '../gpu/context.ts';
import { type FlashTiles, flashTiles } from './attention_checks.ts';

/**
 * Loop iterations one invocation may run per dispatch on a CPU adapter. lavapipe silently
 * stops an invocation after 65 535 loop iterations in total (all loops summed), which would
 * leave wrong results without an error (measured: T = 4000, hs = 128 in one dispatch); this
 * keeps about half of that (chunks of 2084 rows at hs = 128, 4112 at hs = 64).
 */
export const CPU_LOOP_BUDGET = 34000;

/**
 * Test and benchmark hooks. `chunk` (a positive multiple of 4): every adapter streams that many
 * rows per dispatch. `forceTiled`: the shared-memory tiled kernels on a CPU adapter too.
 * `storageBytes`: pick tile sizes for this workgroup-storage budget instead of the device's.
 * `br`: rows per workgroup of the tiled kernels (16, 32 or 64) instead of {@link flashTiles}'s.
 * `subgroups = false`: the tiled forward and backward keep their workgroup-memory variants on a
 * device that has subgroups ({@link subgroupFlash}), so tests can run both.
 */
export const flashTuning: {
  chunk: number | null;
  forceTiled: boolean;
  storageBytes: number | null;
  br: number | null;
  subgroups: boolean;
} = { chunk: null, forceTiled: false, storageBytes: null, br: null, subgroups: true };

/**
 * Whether the tiled kernels read the streamed rows through subgroup shuffles instead of
 * workgroup-memory tiles on `gpu` (K and V for the forward, shaders/flash_attention_tiled_sg.wgsl,
 * and for dQ; Q, dO, L and D for dK/dV, shaders/flash_attention_tiled_bwd_sg.wgsl): the device
 * has `subgroups` and the context asked for them (`Gpu.subgroups`), and {@link flashTuning} does
 * not force the fallback. f32 only: f16 q, k, v keep the workgroup-memory kernels.
 */
export function subgroupFlash(gpu: Gpu): boolean {
  return flashTuning.subgroups && gpu.subgroups;
}

/**
 * The tiles the kernels use on this adapter for `rows` = B·nh·T query rows, or null for the
 * barrier-free kernels (CPU adapters unless `flashTuning.forceTiled`).
 * @throws Error when `flashTuning.br` is set to other than 16, 32 or 64.
 */
export function flashTilesFor(gpu: Gpu, hs: number, rows = Infinity): FlashTiles | null {
  if (gpu.isCpu && !flashTuning.forceTiled) return null;
  const lim = gpu.device.limits;
  const storage = flashTuning.storageBytes ?? lim.maxComputeWorkgroupStorageSize;
  const tiles = flashTiles(hs, storage, lim.maxComputeInvocationsPerWorkgroup, rows);
  const br = flashTuning.br;
  if (br === null) return tiles;
  if (![16, 32, 64].includes(br)) throw new Error(`flashTuning.br must be 16, 32 or 64, got ${br}`);
  return { ...tiles, br };
}

/**
 * Loop iterations of the busiest invocation of a tiled kernel streaming `n` rows in one
 * dispatch: per tile the cooperative load, two Bc·⌈hs/4⌉ loops (scores, then P·V or the
 * gradients) and the rescale; plus loading and storing its own row.
 */
export function flashTiledLoopTrips(n: number, hs: number, tiles: FlashTiles): number {
  const hs4 = Math.ceil(hs / 4);
  const { br, bc } = tiles;
  const perTile = Math.ceil((bc * hs4) / br) + 2 * bc * (hs4 + 1) + hs4 + 1;
  return Math.ceil(n / bc) * perTile + 2 * hs4 + 1;
}

/** Rows a tiled kernel streams per dispatch on a CPU adapter (a multiple of Bc within {@link CPU_LOOP_BUDGET}). */
export function flashTiledCpuChunk(hs: number, tiles: FlashTiles): number {
  const perTile = flashTiledLoopTrips(tiles.bc, hs, tiles) - flashTiledLoopTrips(0, hs, tiles);
  return tiles.bc *
    Math.max(1, Math.floor((CPU_LOOP_BUDGET - flashTiledLoopTrips(0, hs, tiles)) / perTile));
}

/**
 * Loop iterations of the busiest invocation of any of the kernels when it streams `t` rows in
 * one dispatch: ⌈t/4⌉ steps of two ⌈hs/4⌉-long loops, plus loading and storing its own rows.
 */
export function flashLoopTrips(t: number, hs: number): number {
  const hs4 = Math.ceil(hs / 4);
  return Math.ceil(t / 4) * (2 * hs4 + 1) + 3 * hs4;
}

/** Rows streamed per dispatch on a CPU adapter at head size `hs` (see {@link CPU_LOOP_BUDGET}); a multiple of 4. */
export function flashCpuChunk(hs: number): number {
  const hs4 = Math.ceil(hs / 4);
  return 4 * Math.floor((CPU_LOOP_BUDGET - 3 * hs4) / (2 * hs4 + 1));
}
