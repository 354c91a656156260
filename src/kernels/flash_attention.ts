/**
 * FlashAttention-2 (Dao 2023, arXiv 2307.08691) forward and backward, causal or not, with no
 * T×T buffer: the forward saves only y and the log-sum-exp L = m + log ℓ of every query row;
 * the backward recomputes P = exp(scale·QKᵀ − L) (DESIGN.md §5).
 *
 * Same layouts as the naive kernels in attention.ts: qkv (B, T, 3C) (q, k, v of one token side
 * by side; head h at channels h·hs … (h+1)·hs of each), y and dy (B, T, C), lse (B, nh, T).
 *
 * This slice ships the barrier-free variant of shaders/flash_attention.wgsl on every adapter:
 * each invocation owns four query (or, for dK/dV, four key) rows in private arrays and streams
 * the other side's rows from storage, four at a time, with the online softmax. On CPU adapters
 * that is the fast choice (workgroup barriers cost lavapipe and SwiftShader more than the caches
 * they would replace); a shared-memory tiled path for real GPUs is future work.
 *
 * lavapipe silently stops an invocation after 65 535 loop iterations, so on CPU adapters each
 * kernel streams at most {@link flashCpuChunk} rows per dispatch and runs several dispatches
 * over the chunks: dQ and dK/dV simply accumulate, the forward carries its running O (in y),
 * max m (in lse) and sum ℓ (in a pooled (B, nh, T) scratch) from one chunk to the next.
 */
import { f32bits, type Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { specialise } from './shaders.ts';
import { grid1d } from './grid.ts';
import { checkDistinct, checkHeadDims, checkSize } from './attention_checks.ts';

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

/**
 * Loop iterations one invocation may run per dispatch on a CPU adapter. lavapipe silently
 * stops an invocation after 65 535 loop iterations in total (all loops summed), which would
 * leave wrong results without an error (measured: T = 4000, hs = 128 in one dispatch); this
 * keeps about half of that (chunks of 2084 rows at hs = 128, 4112 at hs = 64).
 */
export const CPU_LOOP_BUDGET = 34000;

/** Test hook: when `chunk` is set (a positive multiple of 4), every adapter streams that many rows per dispatch. */
export const flashTuning: { chunk: number | null } = { chunk: null };

const WG = 64;

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

function checkDims(what: string, d: FlashAttentionDims): number {
  const hs = checkHeadDims(what, d);
  if (hs > FLASH_MAX_HEAD_SIZE) {
    throw new Error(`${what}: head size ${hs} is over the supported ${FLASH_MAX_HEAD_SIZE}`);
  }
  return hs;
}

type Entry = 'fwd' | 'dsum' | 'dq' | 'dkv';

/** Rows streamed per dispatch: all of T on GPUs, {@link flashCpuChunk} on CPU adapters. */
function chunkOf(gpu: Gpu, t: number, hs: number): number {
  const forced = flashTuning.chunk;
  if (forced !== null) {
    if (!Number.isInteger(forced) || forced < 4 || forced % 4 !== 0) {
      throw new Error(`flashTuning.chunk must be a positive multiple of 4, got ${forced}`);
    }
    return forced;
  }
  return gpu.isCpu ? flashCpuChunk(hs) : Math.ceil(t / 4) * 4;
}

function run(
  gpu: Gpu,
  entry: Entry,
  hs: number,
  d: FlashAttentionDims,
  bindings: (Tensor | undefined)[],
  chunk: { lo: number; hi: number; first: boolean; final: boolean } = {
    lo: 0,
    hi: d.t,
    first: true,
    final: true,
  },
): void {
  const code = specialise(entry === 'fwd' ? gpu.shaders.flash_attention : gpu.shaders.flash_attention_bwd, { HS: `${hs}u` });
  const rows = d.b * d.nh * d.t;
  // `fwd`, `dq` and `dkv` run four rows per invocation, `dsum` one.
  const items = entry === 'dsum' ? rows : d.b * d.nh * Math.ceil(d.t / 4);
  // deno-fmt-ignore
  const params = new Uint32Array([
    d.b, d.t, d.c, d.nh,
    rows, (d.causal ?? true) ? 1 : 0, f32bits(1 / Math.sqrt(hs)), Math.ceil(hs / 4),
    chunk.lo, chunk.hi, chunk.first ? 1 : 0, chunk.final ? 1 : 0,
  ]);
  const slots: (Tensor | undefined)[] = new Array(8).fill(undefined);
  bindings.forEach((b, i) => (slots[i] = b));
  gpu.dispatch(
    { key: `flash_attention.${entry}.hs${hs}`, code, entryPoint: entry },
    slots,
    params,
    grid1d(items, WG),
  );
}

/** Runs `entry` over the streamed rows in chunks of {@link chunkOf}. */
function runChunked(
  gpu: Gpu,
  entry: Entry,
  hs: number,
  d: FlashAttentionDims,
  bindings: (Tensor | undefined)[],
): void {
  const step = chunkOf(gpu, d.t, hs);
  for (let lo = 0; lo < d.t; lo += step) {
    const hi = Math.min(d.t, lo + step);
    run(gpu, entry, hs, d, bindings, { lo, hi, first: lo === 0, final: hi >= d.t });
  }
}

/**
 * FlashAttention-2 forward: y (B, T, C) and lse (B, nh, T) from qkv (B, T, 3C) (q, k, v
 * interleaved per token as in attention.ts; head h = channels h·hs … of each). Scale is
 * 1/sqrt(hs). One dispatch (one per chunk of keys on CPU adapters, see {@link flashCpuChunk})
 * and a pooled (B, nh, T) scratch for ℓ; no T×T buffer. Every element of y and lse is written.
 * @throws Error when a shape does not match `dims`, the head size is over 128, or an output
 *   shares a GPUBuffer with another operand.
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
  checkSize(what, 'qkv', qkv, [b, t, 3 * c]);
  checkSize(what, 'y', y, [b, t, c]);
  checkSize(what, 'lse', lse, [b, nh, t]);
  checkDistinct(what, [['y', y], ['lse', lse]], [['qkv', qkv]]);
  // The running sum ℓ between chunks; a single chunk never reads it.
  const lsum = gpu.empty([b, nh, t], 'f32', 'flash_attention.l');
  try {
    runChunked(gpu, 'fwd', hs, dims, [
      qkv,
      undefined,
      undefined,
      undefined,
      undefined,
      y,
      lse,
      lsum,
    ]);
  } finally {
    lsum.release();
  }
}

/**
 * FlashAttention-2 backward: dqkv (B, T, 3C) += ∂L/∂qkv, given dy = ∂L/∂y (B, T, C) and the
 * y and lse that {@link flashAttentionForward} produced with the same dims. Three dispatches
 * (dQ and dK/dV one per chunk on CPU adapters): D = rowsum(dO ∘ O) into a pooled (B, nh, T)
 * scratch (released once encoded); dQ over blocks of four query rows; dK/dV over blocks of
 * four key rows, each recomputing P = exp(scale·QKᵀ − L). Nothing of size O(T²) is allocated.
 * @throws Error when a shape does not match `dims` (see {@link flashAttentionForward}) or
 *   dqkv shares a GPUBuffer with an input.
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
  checkSize(what, 'qkv', qkv, [b, t, 3 * c]);
  checkSize(what, 'y', y, [b, t, c]);
  checkSize(what, 'lse', lse, [b, nh, t]);
  checkSize(what, 'dy', dy, [b, t, c]);
  checkSize(what, 'dqkv', dqkv, [b, t, 3 * c]);
  checkDistinct(what, [['dqkv', dqkv]], [['qkv', qkv], ['y', y], ['lse', lse], ['dy', dy]]);

  const dsum = gpu.empty([b, nh, t], 'f32', 'flash_attention.D');
  try {
    run(gpu, 'dsum', hs, dims, [undefined, dy, y, undefined, undefined, dsum]);
    runChunked(gpu, 'dq', hs, dims, [qkv, dy, undefined, lse, dsum, dqkv]);
    runChunked(gpu, 'dkv', hs, dims, [qkv, dy, undefined, lse, dsum, dqkv]);
  } finally {
    dsum.release();
  }
}
