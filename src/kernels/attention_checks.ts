/**
 * Argument checks shared by the attention kernels (naive and flash): they fail with the
 * tensor's name, its shape and what was expected, before anything reaches the GPU. Also the
 * device-limit arithmetic of flash attention's tiled kernels ({@link flashTiles}), pure so it
 * can be tested against any limits.
 */
import type { Tensor } from '../gpu/tensor.ts';

/** Batch, sequence, width, heads of one attention call. */
export interface HeadDims {
  b: number;
  t: number;
  c: number;
  nh: number;
}

/**
 * Returns the head size c / nh.
 * @throws Error when a dimension is not a positive integer or nh does not divide c.
 */
export function checkHeadDims(what: string, d: HeadDims): number {
  for (const k of ['b', 't', 'c', 'nh'] as const) {
    if (!Number.isInteger(d[k]) || d[k] < 1) {
      throw new Error(`${what}: dims.${k} must be a positive integer, got ${d[k]}`);
    }
  }
  if (d.c % d.nh !== 0) {
    throw new Error(`${what}: channels c=${d.c} not divisible by heads nh=${d.nh}`);
  }
  return d.c / d.nh;
}

/** @throws Error when t's element count or dtype differ from an f32 (or, with `f16`, f16) tensor of `shape`. */
export function checkSize(what: string, name: string, t: Tensor, shape: number[], f16 = false): void {
  const n = shape.reduce((x, y) => x * y, 1);
  if (t.size !== n) {
    throw new Error(
      `${what}: ${name} has shape [${t.shape}] (${t.size} elements), expected [${shape}]`,
    );
  }
  if (t.dtype !== 'f32' && !(f16 && t.dtype === 'f16')) {
    throw new Error(`${what}: ${name} must be f32${f16 ? ' or f16' : ''}, got ${t.dtype}`);
  }
}

/**
 * @throws Error when a writable tensor shares its GPUBuffer with any other operand: WebGPU
 *   rejects a buffer bound writable together with another binding of it.
 */
export function checkDistinct(
  what: string,
  writable: [string, Tensor][],
  others: [string, Tensor][],
): void {
  const all = [...writable, ...others];
  for (let i = 0; i < writable.length; i++) {
    for (let j = 0; j < all.length; j++) {
      const [wn, w] = writable[i];
      const [on, o] = all[j];
      if (i !== j && o.buffer === w.buffer) {
        throw new Error(
          `${what}: ${wn} and ${on} share one GPUBuffer; WebGPU cannot bind a writable buffer together with another binding of it`,
        );
      }
    }
  }
}

/**
 * Workgroups the tiled kernels aim for: with fewer (small B·nh·T) a GPU idles most of its
 * cores, so Br drops to 32, then 16, trading K/V reuse for parallelism (FlashAttention-2 §3.2
 * parallelises over sequence blocks for the same reason).
 */
export const FLASH_MIN_WORKGROUPS = 256;

/**
 * The largest Bc the tiled kernels take. Measured on an H100 (docs/gpu-results.md), T = 4096,
 * hs = 64: a 64-key tile ran the forward + backward 1.5× (wgpu) to 4.8× (Dawn) slower than a
 * 32-key one; at hs = 128, where 32 already is the storage limit, 32 was also the fastest on Dawn.
 * Each invocation keeps a tile's Bc scores beside q and o in registers, so a wider tile most
 * likely spills them (docs/design.md#flashattention-2).
 */
export const FLASH_MAX_BC = 32;

/** Tile sizes of the tiled kernels: Br rows per workgroup (one invocation each), Bc rows per staged tile. */
export interface FlashTiles {
  br: number;
  bc: number;
  /** Workgroup storage the two staged tiles take (bytes). */
  bytes: number;
}

/**
 * Tile sizes for head size `hs` within a workgroup-storage budget: Br query (or key) rows per
 * workgroup, each held in registers by its own invocation — 64, halved down to 16 while the
 * B·nh·T `rows` would make fewer than {@link FLASH_MIN_WORKGROUPS} workgroups — and the largest
 * power-of-two Bc ≤ {@link FLASH_MAX_BC} whose two staged tiles (K and V, or Q and dO:
 * 2·Bc·⌈hs/4⌉ vec4s) fit `maxStorageBytes`: at hs = 64 and the default 16 KiB, Bc = 32
 * (docs/design.md#flashattention-2).
 * @param maxInvocations the device's maxComputeInvocationsPerWorkgroup (Br never exceeds it).
 * @throws Error naming maxComputeWorkgroupStorageSize when not even Bc = 1 fits, or when an
 *   argument is not a positive integer.
 */
export function flashTiles(
  hs: number,
  maxStorageBytes: number,
  maxInvocations = 256,
  rows = Infinity,
): FlashTiles {
  const args = { hs, maxStorageBytes, maxInvocations, rows: rows === Infinity ? 1 : rows };
  for (const [k, v] of Object.entries(args)) {
    if (!Number.isInteger(v) || v < 1) {
      throw new Error(`flashTiles: ${k} must be a positive integer, got ${v}`);
    }
  }
  const row = 2 * Math.ceil(hs / 4) * 16;
  let bc = FLASH_MAX_BC;
  while (bc > 1 && bc * row > maxStorageBytes) bc /= 2;
  if (bc * row > maxStorageBytes) {
    throw new Error(
      `flashTiles: head size ${hs} needs ${row} B of workgroup storage per tile row, over the device's maxComputeWorkgroupStorageSize ${maxStorageBytes}`,
    );
  }
  let br = 64;
  while (br > 16 && (br > maxInvocations || rows / br < FLASH_MIN_WORKGROUPS)) br /= 2;
  while (br > maxInvocations) br /= 2;
  return { br, bc, bytes: bc * row };
}
