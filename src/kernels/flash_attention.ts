/**
 * FlashAttention-2 (Dao 2023, arXiv 2307.08691) forward and backward, causal or not, with no
 * T×T buffer: the forward saves only y and the log-sum-exp L = m + log ℓ of every query row;
 * the backward recomputes P = exp(scale·QKᵀ − L) (docs/design.md#flashattention-2).
 *
 * Same layouts as the naive kernels in attention.ts: qkv (B, T, 3C) (q, k, v of one token side
 * by side; head h at channels h·hs … (h+1)·hs of each), y and dy (B, T, C), lse (B, nh, T).
 *
 * Two variants of the same equations:
 * - GPUs (`!gpu.isCpu`, or `flashTuning.forceTiled`) get the shared-memory tiled kernels of
 *   shaders/flash_attention_tiled*.wgsl: one workgroup per (b, h, block of Br query rows — key
 *   rows for dK/dV), the other side staged in workgroup memory in tiles of Bc rows, with Bc
 *   chosen from maxComputeWorkgroupStorageSize and the head size ({@link flashTiles}). Where
 *   the device has `subgroups` the forward and both backward passes share the streamed rows
 *   between the lanes of a subgroup with shuffles instead ({@link subgroupFlash}).
 * - CPU adapters get the barrier-free shaders/flash_attention.wgsl: each invocation owns four
 *   query (or key) rows in private arrays and streams the other side's rows from storage, four
 *   at a time; workgroup barriers cost lavapipe and SwiftShader more than the caches they save.
 *
 * lavapipe silently stops an invocation after 65 535 loop iterations, so on CPU adapters each
 * kernel streams at most {@link flashCpuChunk} rows per dispatch (the tiled kernels, when forced
 * there, {@link flashTiledCpuChunk}) and runs several dispatches over the chunks: dQ and dK/dV
 * simply accumulate, the forward carries its running O (in y), max m (in lse) and sum ℓ (in a
 * pooled (B, nh, T) scratch) from one chunk to the next. GPUs run each kernel in one dispatch.
 */
import { f32bits, type Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { specialise } from './shaders.ts';
import { requireF16 } from './cast.ts';
import { grid1d } from './grid.ts';
import {
  checkDistinct,
  checkHeadDims,
  checkSize,
  FLASH_MAX_BC,
  FLASH_MIN_WORKGROUPS,
  type FlashTiles,
  flashTiles,
} from './attention_checks.ts';

import { flashCpuChunk, flashTiledCpuChunk, flashTilesFor, flashTuning, subgroupFlash } from './flash_tuning.ts';

export { FLASH_MAX_BC, FLASH_MIN_WORKGROUPS, type FlashTiles, flashTiles };
export {
  CPU_LOOP_BUDGET,
  flashCpuChunk,
  flashLoopTrips,
  flashTiledCpuChunk,
  flashTiledLoopTrips,
  flashTilesFor,
  flashTuning,
  subgroupFlash,
} from './flash_tuning.ts';

/** Shapes of one attention call: batch, sequence length, channels (= nh·hs), heads. */
export interface FlashAttentionDims {
  b: number;
  t: number;
  c: number;
  nh: number;
  /** Mask keys s > query t (default true, as attention.ts). */
  causal?: boolean;
}

/** Largest head size: each invocation keeps up to sixteen head rows (four rows × q/k, v, dq/dk, dv) in private arrays. */
export const FLASH_MAX_HEAD_SIZE = 128;

const WG = 64;

function checkDims(what: string, d: FlashAttentionDims): number {
  const hs = checkHeadDims(what, d);
  if (hs > FLASH_MAX_HEAD_SIZE) {
    throw new Error(`${what}: head size ${hs} is over the supported ${FLASH_MAX_HEAD_SIZE}`);
  }
  return hs;
}

type Entry = 'fwd' | 'dsum' | 'dq' | 'dkv';

/** Rows streamed per dispatch: all of T on GPUs, {@link flashCpuChunk} (or the tiled one) on CPU adapters. */
function chunkOf(gpu: Gpu, t: number, hs: number, tiles: FlashTiles | null): number {
  const forced = flashTuning.chunk;
  if (forced !== null) {
    if (!Number.isInteger(forced) || forced < 4 || forced % 4 !== 0) {
      throw new Error(`flashTuning.chunk must be a positive multiple of 4, got ${forced}`);
    }
    return forced;
  }
  if (!gpu.isCpu) return Math.ceil(t / 4) * 4;
  return tiles ? flashTiledCpuChunk(hs, tiles) : flashCpuChunk(hs);
}

function run(
  gpu: Gpu,
  entry: Entry,
  hs: number,
  d: FlashAttentionDims,
  bindings: (Tensor | undefined)[],
  tiles: FlashTiles | null,
  chunk: { lo: number; hi: number; first: boolean; final: boolean } = {
    lo: 0,
    hi: d.t,
    first: true,
    final: true,
  },
): void {
  // `dsum` (one row per invocation, no reuse to tile) always runs barrier-free.
  const tiled = tiles !== null && entry !== 'dsum';
  // f16 q, k, v (mixed precision): the same kernels with qkv declared array<f16> (halfQkv).
  const half = bindings[0]?.dtype === 'f16';
  // The subgroup kernels (forward, dQ and dK/dV) stage no tiles, so no Bc; fixed here, at pipeline
  // creation. f16 keeps the workgroup-memory kernels: no adapter the tests reach has both features.
  const sg = tiled && !half && subgroupFlash(gpu);
  const sh = gpu.shaders;
  const src = entry === 'fwd'
    ? (sg ? sh.flash_attention_tiled_sg : tiled ? sh.flash_attention_tiled : sh.flash_attention)
    : (sg ? sh.flash_attention_tiled_bwd_sg : tiled ? sh.flash_attention_tiled_bwd : sh.flash_attention_bwd);
  const consts: Record<string, string> = { HS: `${hs}u` };
  if (tiled) Object.assign(consts, sg ? { BR: `${tiles.br}u` } : { BR: `${tiles.br}u`, BC: `${tiles.bc}u` });
  const code = half ? halfQkv(specialise(src, consts)) : specialise(src, consts);
  const rows = d.b * d.nh * d.t;
  // Barrier-free `fwd`, `dq` and `dkv` run four rows per invocation, `dsum` one; the tiled ones
  // one workgroup per block of Br rows.
  const grid = tiled
    ? grid1d(d.b * d.nh * Math.ceil(d.t / tiles.br), 1)
    : grid1d(entry === 'dsum' ? rows : d.b * d.nh * Math.ceil(d.t / 4), WG);
  // deno-fmt-ignore
  const params = new Uint32Array([
    d.b, d.t, d.c, d.nh,
    rows, (d.causal ?? true) ? 1 : 0, f32bits(1 / Math.sqrt(hs)), Math.ceil(hs / 4),
    chunk.lo, chunk.hi, chunk.first ? 1 : 0, chunk.final ? 1 : 0,
  ]);
  const slots: (Tensor | undefined)[] = new Array(8).fill(undefined);
  bindings.forEach((b, i) => (slots[i] = b));
  gpu.dispatch(
    tiled
      ? {
        key: `flash_attention.${entry}_tiled.hs${hs}.br${tiles.br}${sg ? '.sg' : `.bc${tiles.bc}`}${
          half ? '.f16' : ''
        }`,
        code,
        entryPoint: `${entry}_tiled`,
      }
      : { key: `flash_attention.${entry}.hs${hs}${half ? '.f16' : ''}`, code, entryPoint: entry },
    slots,
    params,
    grid,
  );
}

/**
 * A flash kernel's WGSL with qkv declared array<f16>: its one reader, ld_qkv, converts to f32.
 * @throws Error when the declaration is not found, so a renamed binding cannot be missed.
 */
function halfQkv(code: string): string {
  const decl = 'var<storage, read> qkv: array<f32>;';
  if (!code.includes(decl)) throw new Error(`flash attention: the kernel has no '${decl}' to make f16`);
  return 'enable f16;\n' + code.replace(decl, 'var<storage, read> qkv: array<f16>;');
}

/** Runs `entry` over the streamed rows in chunks of {@link chunkOf}. */
function runChunked(
  gpu: Gpu,
  entry: Entry,
  hs: number,
  d: FlashAttentionDims,
  bindings: (Tensor | undefined)[],
  tiles: FlashTiles | null,
): void {
  const step = chunkOf(gpu, d.t, hs, tiles);
  for (let lo = 0; lo < d.t; lo += step) {
    const hi = Math.min(d.t, lo + step);
    run(gpu, entry, hs, d, bindings, tiles, { lo, hi, first: lo === 0, final: hi >= d.t });
  }
}

/**
 * FlashAttention-2 forward: y (B, T, C) and lse (B, nh, T) from qkv (B, T, 3C) (q, k, v
 * interleaved per token as in attention.ts; head h = channels h·hs … of each; f32, or f16 on a
 * device with shader-f16 — math, y and lse stay f32). Scale is
 * 1/sqrt(hs). One dispatch (one per chunk of keys on CPU adapters, see {@link flashCpuChunk}),
 * tiled over Br query rows per workgroup on GPUs ({@link flashTilesFor}), and a pooled
 * (B, nh, T) scratch for ℓ; no T×T buffer. Every element of y and lse is written.
 * @throws Error when a shape does not match `dims`, the head size is over 128, an output
 *   shares a GPUBuffer with another operand, or (tiled) the head size does not fit the
 *   device's maxComputeWorkgroupStorageSize.
 */
export function flashAttentionForward(
  gpu: Gpu,
  qkv: Tensor,
  y: Tensor,
  lse: Tensor,
  dims: FlashAttentionDims,
): void {
  const what = 'flashAttentionForward';
  const hs = checkDims(what, dims);
  const { b, t, c, nh } = dims;
  checkSize(what, 'qkv', qkv, [b, t, 3 * c], true);
  if (qkv.dtype === 'f16') requireF16(gpu, what);
  checkSize(what, 'y', y, [b, t, c]);
  checkSize(what, 'lse', lse, [b, nh, t]);
  checkDistinct(what, [['y', y], ['lse', lse]], [['qkv', qkv]]);
  // The running sum ℓ between chunks; a single chunk never reads it.
  const lsum = gpu.empty([b, nh, t], 'f32', 'flash_attention.l');
  try {
    const io = [qkv, undefined, undefined, undefined, undefined, y, lse, lsum];
    runChunked(gpu, 'fwd', hs, dims, io, flashTilesFor(gpu, hs, b * nh * t));
  } finally {
    lsum.release();
  }
}

/**
 * FlashAttention-2 backward: dqkv (B, T, 3C) += ∂L/∂qkv, given dy = ∂L/∂y (B, T, C) and the
 * y and lse that {@link flashAttentionForward} produced with the same dims. Three dispatches
 * (dQ and dK/dV one per chunk on CPU adapters): D = rowsum(dO ∘ O) into a pooled (B, nh, T)
 * scratch (released once encoded); dQ over blocks of query rows (four per invocation, or Br
 * per workgroup with K/V tiles in workgroup memory on GPUs, or shared by subgroup shuffles where
 * {@link subgroupFlash}); dK/dV likewise over key rows with Q/dO; each recomputes
 * P = exp(scale·QKᵀ − L) (FlashAttention-2, Algorithm 2). Nothing of size O(T²) is allocated.
 * @throws Error when a shape does not match `dims` (see {@link flashAttentionForward}),
 *   dqkv shares a GPUBuffer with an input, or (tiled) the tiles do not fit the device.
 */
export function flashAttentionBackward(
  gpu: Gpu,
  qkv: Tensor,
  y: Tensor,
  lse: Tensor,
  dy: Tensor,
  dqkv: Tensor,
  dims: FlashAttentionDims,
): void {
  const what = 'flashAttentionBackward';
  const hs = checkDims(what, dims);
  const { b, t, c, nh } = dims;
  checkSize(what, 'qkv', qkv, [b, t, 3 * c], true);
  if (qkv.dtype === 'f16') requireF16(gpu, what);
  checkSize(what, 'y', y, [b, t, c]);
  checkSize(what, 'lse', lse, [b, nh, t]);
  checkSize(what, 'dy', dy, [b, t, c]);
  checkSize(what, 'dqkv', dqkv, [b, t, 3 * c]);
  checkDistinct(what, [['dqkv', dqkv]], [['qkv', qkv], ['y', y], ['lse', lse], ['dy', dy]]);

  const dsum = gpu.empty([b, nh, t], 'f32', 'flash_attention.D');
  try {
    const tiles = flashTilesFor(gpu, hs, b * nh * t);
    run(gpu, 'dsum', hs, dims, [undefined, dy, y, undefined, undefined, dsum], null);
    runChunked(gpu, 'dq', hs, dims, [qkv, dy, undefined, lse, dsum, dqkv], tiles);
    runChunked(gpu, 'dkv', hs, dims, [qkv, dy, undefined, lse, dsum, dqkv], tiles);
  } finally {
    dsum.release();
  }
}
