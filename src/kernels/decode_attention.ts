/**
 * Decoding attention over a KV cache (docs/design.md#decoding-with-a-kv-cache): {@link kvAppend} writes the keys and
 * values of new tokens into per-layer caches, {@link decodeAttention} attends one new query row
 * per (b, head) over the cached keys 0 … len−1. Equations and bindings: shaders/decode_attention.wgsl.
 *
 * Layouts: qkv (B, t, 3C) as in attention.ts (q, k, v of one token side by side; head h at
 * channels h·hs … (h+1)·hs of each), caches (B, nh, Tmax, hs), y (B, 1, C). Causality holds by
 * construction: the cache holds no position after the query's. Scale 1/√hs, as FlashAttention.
 */
import { f32bits, type Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { grid1d } from './grid.ts';
import { checkDistinct, checkHeadDims, checkSize } from './attention_checks.ts';
import { CPU_LOOP_BUDGET } from './flash_tuning.ts';

/** Shape of one cache and of the calls on it: batch, width C = nh·hs, heads, rows per (b, h). */
export interface KvCacheDims {
  b: number;
  c: number;
  nh: number;
  /** Positions the cache holds (rows per (b, h)). */
  tMax: number;
}

/** Largest head size: the kernel keeps the query row in workgroup memory (MAX_HS in the shader). */
export const DECODE_MAX_HEAD_SIZE = 128;

const WG = 64;

/**
 * Loop trips of one decode invocation (lavapipe stops an invocation after 65 535 in total,
 * flash_tuning.ts CPU_LOOP_BUDGET): the score loop ⌈len/64⌉·(hs+1), the value loop ⌈hs/64⌉·(len+1).
 */
export function decodeLoopTrips(len: number, hs: number): number {
  return Math.ceil(len / WG) * (hs + 1) + Math.ceil(hs / WG) * (len + 1) + Math.ceil(hs / WG) + 14;
}

function checkDims(what: string, d: KvCacheDims): number {
  const hs = checkHeadDims(what, { b: d.b, t: d.tMax, c: d.c, nh: d.nh });
  if (hs > DECODE_MAX_HEAD_SIZE) {
    throw new Error(`${what}: head size ${hs} is over the supported ${DECODE_MAX_HEAD_SIZE}`);
  }
  return hs;
}

function params(
  d: KvCacheDims,
  hs: number,
  t: number,
  pos: number,
  len: number,
  mode = 0,
  src0 = 0,
  tq = t,
): Uint32Array {
  // deno-fmt-ignore
  return new Uint32Array([d.b, t, d.c, d.nh, hs, d.tMax, pos, len, f32bits(1 / Math.sqrt(hs)), mode, src0, tq]);
}

/**
 * Writes the keys and values of `t` new tokens into the caches at positions pos … pos+t−1:
 * kCache[b, h, pos+i, :] = k of token (b, from + i), vCache likewise.
 * @param qkv (B, tq, 3C) f32, the attention input of the new tokens (tq = t unless `from` picks a
 *   run of them: a rank of a sharded cache keeps its own positions, docs/design.md#tree-attention-decoding)
 * @param kCache (B, nh, Tmax, hs) f32, @param vCache the same shape
 * @param from first token of qkv appended (default 0); from + t ≤ tq
 * @throws Error when a shape does not match `dims`, the head size is over 128, pos + t exceeds
 *   Tmax (cache overflow), from + t exceeds qkv's tokens, or a cache shares a GPUBuffer with
 *   another operand.
 */
export function kvAppend(
  gpu: Gpu,
  qkv: Tensor,
  kCache: Tensor,
  vCache: Tensor,
  dims: KvCacheDims,
  t: number,
  pos: number,
  from = 0,
): void {
  const what = 'kvAppend';
  const hs = checkDims(what, dims);
  const { b, c, nh, tMax } = dims;
  if (!Number.isInteger(t) || t < 1) throw new Error(`${what}: t must be a positive integer, got ${t}`);
  if (!Number.isInteger(pos) || pos < 0 || pos + t > tMax) {
    throw new Error(
      `${what}: positions ${pos} … ${pos + t - 1} do not fit a cache of ${tMax} positions (allowed 0 … ${tMax - 1})`,
    );
  }
  const tq = qkv.size / (b * 3 * c); // qkv may come as (B·tq, 3C): its size says tq
  if (!Number.isInteger(from) || from < 0 || !Number.isInteger(tq) || from + t > tq) {
    throw new Error(`${what}: tokens ${from} … ${from + t - 1} are not in qkv's ${tq}`);
  }
  checkSize(what, 'qkv', qkv, [b, tq, 3 * c]);
  checkSize(what, 'kCache', kCache, [b, nh, tMax, hs]);
  checkSize(what, 'vCache', vCache, [b, nh, tMax, hs]);
  checkDistinct(what, [['kCache', kCache], ['vCache', vCache]], [['qkv', qkv]]);
  gpu.dispatch(
    { key: 'decode_attention.append', code: gpu.shaders.decode_attention, entryPoint: 'kv_append' },
    [qkv, kCache, vCache, undefined, undefined],
    params(dims, hs, t, pos, 0, 0, from, tq),
    grid1d(b * t * c, WG),
  );
}

/**
 * y (B, 1, C) = softmax(q·kᵀ/√hs) · v over the cached positions 0 … len−1, for the one query
 * row per batch row in qkv (B, 1, 3C) (its k and v must already be appended at position len−1).
 * One workgroup per (b, h); the scores go through a pooled (B, nh, Tmax) scratch, released once
 * encoded. Every element of y is written. Reads 2·len·C·4 bytes of cache per batch row.
 * @throws Error when a shape does not match `dims`, len is outside 1 … Tmax, the head size is
 *   over 128, y shares a GPUBuffer with an operand, or (CPU adapters) len is past what one
 *   invocation may loop over ({@link decodeLoopTrips}).
 */
export function decodeAttention(
  gpu: Gpu,
  qkv: Tensor,
  kCache: Tensor,
  vCache: Tensor,
  y: Tensor,
  dims: KvCacheDims,
  len: number,
): void {
  runDecode(gpu, 'decodeAttention', qkv, kCache, vCache, y, dims, len, 0);
}

/**
 * The partial form of {@link decodeAttention} (docs/design.md#tree-attention-decoding, tree attention of Shyam et al.,
 * arXiv 2408.04093): over the keys 0 … len−1 of this rank's shard of the cache, per (b, h) the row
 * [m, ℓ, o_0 … o_{hs−1}] of partial (B, nh, hs + 2) with m = max_j s_j, ℓ = Σ_j exp(s_j − m) and
 * o = Σ_j exp(s_j − m)·v_j (unnormalised), s_j = q·k_j/√hs. Partials of disjoint shards merge
 * exactly (src/models/tree_decode.ts); o/ℓ of one partial is decodeAttention's y. The query is
 * read from qkv (B, 1, 3C) as decodeAttention reads it; no position after it need be cached here.
 * @throws Error as decodeAttention (len in 1 … Tmax; an empty shard has no partial to compute: its
 *   identity is m = −∞, ℓ = 0, o = 0), or when partial is not (B, nh, hs + 2).
 */
export function decodeAttentionPartial(
  gpu: Gpu,
  qkv: Tensor,
  kCache: Tensor,
  vCache: Tensor,
  partial: Tensor,
  dims: KvCacheDims,
  len: number,
): void {
  runDecode(gpu, 'decodeAttentionPartial', qkv, kCache, vCache, partial, dims, len, 1);
}

/** Checks and dispatches the decode entry point: mode 0 writes y (B, 1, C), mode 1 the partial. */
function runDecode(
  gpu: Gpu,
  what: string,
  qkv: Tensor,
  kCache: Tensor,
  vCache: Tensor,
  y: Tensor,
  dims: KvCacheDims,
  len: number,
  mode: 0 | 1,
): void {
  const hs = checkDims(what, dims);
  const { b, c, nh, tMax } = dims;
  if (!Number.isInteger(len) || len < 1 || len > tMax) {
    throw new Error(`${what}: len must be an integer in 1 … ${tMax} (the cache's positions), got ${len}`);
  }
  checkSize(what, 'qkv', qkv, [b, 1, 3 * c]);
  checkSize(what, 'kCache', kCache, [b, nh, tMax, hs]);
  checkSize(what, 'vCache', vCache, [b, nh, tMax, hs]);
  const out = mode === 1 ? 'partial' : 'y';
  checkSize(what, out, y, mode === 1 ? [b, nh, hs + 2] : [b, 1, c]);
  checkDistinct(what, [[out, y]], [['qkv', qkv], ['kCache', kCache], ['vCache', vCache]]);
  if (gpu.isCpu && decodeLoopTrips(len, hs) > CPU_LOOP_BUDGET) {
    throw new Error(
      `${what}: ${len} cached positions at head size ${hs} exceed one invocation's loop budget on a CPU adapter (${CPU_LOOP_BUDGET} trips)`,
    );
  }
  const scratch = gpu.empty([b, nh, tMax], 'f32', 'decode_attention.scores');
  try {
    gpu.dispatch(
      { key: 'decode_attention.decode', code: gpu.shaders.decode_attention, entryPoint: 'decode' },
      [qkv, kCache, vCache, y, scratch],
      params(dims, hs, 1, 0, len, mode),
      grid1d(b * nh, 1),
    );
  } finally {
    scratch.release();
  }
}
