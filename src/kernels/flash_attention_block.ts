/**
 * FlashAttention-2 (Dao 2023, arXiv 2307.08691) on one (query block, key/value block) pair:
 * the building block of ring attention (Liu et al., arXiv 2310.01889) and its zig-zag
 * load-balanced form (Brandon et al., Striped Attention arXiv 2311.09431; zhuzilin/
 * ring-flash-attention `zigzag_ring_flash_attn.py`). Kernels: shaders/flash_attention_block.wgsl.
 *
 * Queries and keys/values come from separate tensors, each a block of `n` consecutive rows of
 * a (B, rows, width) tensor with its own global position `pos` of the first row; causal
 * masking compares global positions (key ≤ query), so a block pair may be fully visible,
 * diagonal, or (skipped by the caller) fully masked.
 *
 * - {@link flashBlockForward}: partial O (B, rows, C) and its log-sum-exp L (B, nh, rows) of
 *   the query rows against one key block, or (`accumulate`) the block folded into the running
 *   (O, L) already there, which equals the merge O = Σ_i e^{L_i − L} O_i, L = log Σ_i e^{L_i}.
 * - {@link flashBlockDsum}: D = rowsum(dO ∘ O) of the merged output.
 * - {@link flashBlockBackward}: given the global L and D, dQ += and dK, dV += of the pair.
 *
 * Every kernel runs one row per invocation with the other side streamed (no workgroup
 * memory); on CPU adapters the streamed rows are split over dispatches to stay within
 * lavapipe's 65 535 loop iterations per invocation ({@link flashBlockChunk}).
 */
import { f32bits, type Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { specialise } from './shaders.ts';
import { grid1d } from './grid.ts';
import { checkDistinct, checkHeadDims, checkSize } from './attention_checks.ts';
import { CPU_LOOP_BUDGET, FLASH_MAX_HEAD_SIZE } from './flash_attention.ts';

/** `n` consecutive rows of a (B, rows, width) tensor, starting at row `first` (global position `pos`). */
export interface RowBlock {
  /** Rows per batch element of the tensor (its second dimension). */
  rows: number;
  /** First row of the block. */
  first: number;
  /** Rows in the block. */
  n: number;
  /** Global sequence position of row `first`; causal masking compares positions. */
  pos: number;
}

/** Where one side's vectors sit in a row: row width and the channel of q (or k; v follows at + C). */
export interface RowLayout {
  width: number;
  offset: number;
}

/** Geometry of one block call. */
export interface FlashBlockDims {
  b: number;
  /** Model width C = nh·hs. */
  c: number;
  nh: number;
  /** Mask keys whose position is past the query's (default true). */
  causal?: boolean;
  q: RowBlock;
  kv: RowBlock;
  /** q inside the query tensor's rows; default {width: 3C, offset: 0} (a qkv tensor). */
  qLayout?: RowLayout;
  /** k (v at + C) inside the key/value tensor's rows; default {width: 3C, offset: C}. */
  kvLayout?: RowLayout;
}

/** Test hook: rows streamed per dispatch (any positive integer) instead of {@link flashBlockChunk}. */
export const flashBlockTuning: { chunk: number | null } = { chunk: null };

/** Streamed rows per dispatch on a CPU adapter at head size `hs`: each costs 2·⌈hs/4⌉ + 1 loop iterations. */
export function flashBlockChunk(hs: number): number {
  const hs4 = Math.ceil(hs / 4);
  return Math.floor((CPU_LOOP_BUDGET - 3 * hs4) / (2 * hs4 + 1));
}

type Entry = 'fwd' | 'dsum' | 'bdq' | 'bdkv';

function checkBlock(what: string, name: string, r: RowBlock): void {
  for (const k of ['rows', 'first', 'n', 'pos'] as const) {
    if (!Number.isInteger(r[k]) || r[k] < (k === 'rows' || k === 'n' ? 1 : 0)) {
      throw new Error(
        `${what}: ${name}.${k} must be a ${k === 'rows' || k === 'n' ? 'positive' : 'non-negative'} integer, got ${
          r[k]
        }`,
      );
    }
  }
  if (r.first + r.n > r.rows) {
    throw new Error(`${what}: ${name} rows ${r.first} … ${r.first + r.n - 1} are past the tensor's ${r.rows} rows`);
  }
}

function checkLayout(what: string, name: string, l: RowLayout, width: number, c: number): void {
  if (!Number.isInteger(l.offset) || l.offset < 0 || l.offset + width > l.width) {
    throw new Error(`${what}: ${name} offset ${l.offset} + ${width} channels do not fit rows of width ${l.width}`);
  }
  if (l.width < c) throw new Error(`${what}: ${name} width ${l.width} is under C = ${c}`);
}

/** Checks dims; returns the head size. */
function checkDims(what: string, d: FlashBlockDims): number {
  const hs = checkHeadDims(what, { b: d.b, t: 1, c: d.c, nh: d.nh });
  if (hs > FLASH_MAX_HEAD_SIZE) {
    throw new Error(`${what}: head size ${hs} is over the supported ${FLASH_MAX_HEAD_SIZE}`);
  }
  checkBlock(what, 'q', d.q);
  checkBlock(what, 'kv', d.kv);
  checkLayout(what, 'qLayout', qLayoutOf(d), d.c, d.c);
  checkLayout(what, 'kvLayout', kvLayoutOf(d), 2 * d.c, d.c);
  return hs;
}

const qLayoutOf = (d: FlashBlockDims): RowLayout => d.qLayout ?? { width: 3 * d.c, offset: 0 };
const kvLayoutOf = (d: FlashBlockDims): RowLayout => d.kvLayout ?? { width: 3 * d.c, offset: d.c };

function dispatch(
  gpu: Gpu,
  entry: Entry,
  hs: number,
  d: FlashBlockDims,
  bindings: (Tensor | undefined)[],
  extra: { acc?: boolean; out?: RowLayout; lo: number; hi: number },
): void {
  const ql = qLayoutOf(d), kl = kvLayoutOf(d), ol = extra.out ?? { width: d.c, offset: 0 };
  const rows = d.b * d.nh * (entry === 'bdkv' ? d.kv.n : d.q.n);
  // deno-fmt-ignore
  const params = new Uint32Array([
    d.b, d.nh, d.c, Math.ceil(hs / 4),
    f32bits(1 / Math.sqrt(hs)), (d.causal ?? true) ? 1 : 0, extra.acc ? 1 : 0, extra.lo,
    extra.hi, d.q.rows, d.q.first, d.q.n,
    d.q.pos, d.kv.rows, d.kv.first, d.kv.n,
    d.kv.pos, ql.width, ql.offset, kl.width,
    kl.offset, ol.width, ol.offset, 0,
  ]);
  const slots: (Tensor | undefined)[] = new Array(7).fill(undefined);
  bindings.forEach((b, i) => (slots[i] = b));
  const code = specialise(gpu.shaders.flash_attention_block, { HS: `${hs}u` });
  gpu.dispatch(
    { key: `flash_attention_block.${entry}.hs${hs}`, code, entryPoint: entry },
    slots,
    params,
    grid1d(rows, 64),
  );
}

/** Runs `entry` over the streamed rows [0, n) in dispatches of at most the chunk size (one on GPUs). */
function streamed(gpu: Gpu, n: number, hs: number, each: (lo: number, hi: number, first: boolean) => void): void {
  const forced = flashBlockTuning.chunk;
  if (forced !== null && (!Number.isInteger(forced) || forced < 1)) {
    throw new Error(`flashBlockTuning.chunk must be a positive integer, got ${forced}`);
  }
  const step = forced ?? (gpu.isCpu ? flashBlockChunk(hs) : n);
  for (let lo = 0; lo < n; lo += step) each(lo, Math.min(n, lo + step), lo === 0);
}

/**
 * Forward of one block pair: the query rows `dims.q` of `q` against the key/value rows
 * `dims.kv` of `kv`. Writes O (rows dims.q of `o`, (B, q.rows, C)) and L (rows dims.q of
 * `lse`, (B, nh, q.rows); L = −1e30 for a row that sees no key, whose O is 0), or with
 * `accumulate` folds the block into the O and L already there (the log-sum-exp merge).
 * `q` and `kv` may be the same tensor (a qkv block against itself).
 * @throws Error when a dimension, block range, layout or tensor size is inconsistent, the head
 *   size is over 128, or o / lse share a GPUBuffer with an input.
 */
export function flashBlockForward(
  gpu: Gpu,
  q: Tensor,
  kv: Tensor,
  o: Tensor,
  lse: Tensor,
  dims: FlashBlockDims,
  opts: { accumulate?: boolean } = {},
): void {
  const what = 'flashBlockForward';
  const hs = checkDims(what, dims);
  const { b, c, nh } = dims;
  checkSize(what, 'q', q, [b, dims.q.rows, qLayoutOf(dims).width]);
  checkSize(what, 'kv', kv, [b, dims.kv.rows, kvLayoutOf(dims).width]);
  checkSize(what, 'o', o, [b, dims.q.rows, c]);
  checkSize(what, 'lse', lse, [b, nh, dims.q.rows]);
  checkDistinct(what, [['o', o], ['lse', lse]], [['q', q], ['kv', kv]]);
  streamed(gpu, dims.kv.n, hs, (lo, hi, first) => {
    dispatch(gpu, 'fwd', hs, dims, [q, kv, undefined, undefined, undefined, o, lse], {
      acc: !first || opts.accumulate,
      lo,
      hi,
    });
  });
}

/**
 * D = rowsum(dO ∘ O) over each head: rows dims.q of `o` and `dy` (B, q.rows, C) into rows
 * dims.q of `dsum` (B, nh, q.rows). Only dims.b, c, nh and q are used.
 * @throws Error on inconsistent sizes or when dsum shares a GPUBuffer with o or dy.
 */
export function flashBlockDsum(gpu: Gpu, o: Tensor, dy: Tensor, dsum: Tensor, dims: FlashBlockDims): void {
  const what = 'flashBlockDsum';
  const hs = checkDims(what, dims);
  const { b, c, nh } = dims;
  checkSize(what, 'o', o, [b, dims.q.rows, c]);
  checkSize(what, 'dy', dy, [b, dims.q.rows, c]);
  checkSize(what, 'dsum', dsum, [b, nh, dims.q.rows]);
  checkDistinct(what, [['dsum', dsum]], [['o', o], ['dy', dy]]);
  dispatch(gpu, 'dsum', hs, dims, [o, undefined, dy, undefined, undefined, dsum], { lo: 0, hi: 0 });
}

/** Gradient outputs of {@link flashBlockBackward}: dQ rows like the queries, dK (dV at + C) rows like the keys. */
export interface BlockGrads {
  dq: Tensor | null;
  /** Default {width: 3C, offset: 0}. */
  dqLayout?: RowLayout;
  dkv: Tensor | null;
  /** Default {width: 3C, offset: C}. */
  dkvLayout?: RowLayout;
}

/**
 * Backward of one block pair, given dy = dO (B, q.rows, C) of the merged output and its global
 * L and D (B, nh, q.rows): dQ += scale·dS K into `grads.dq` (rows dims.q) and dK += scale·dSᵀ Q,
 * dV += Pᵀ dO into `grads.dkv` (rows dims.kv), with P = exp(scale·QKᵀ − L), dS = P ∘ (dO Vᵀ − D).
 * Accumulates; a null output is skipped.
 * @throws Error on inconsistent sizes or layouts, or when an output shares a GPUBuffer with an input.
 */
export function flashBlockBackward(
  gpu: Gpu,
  q: Tensor,
  kv: Tensor,
  dy: Tensor,
  lse: Tensor,
  dsum: Tensor,
  grads: BlockGrads,
  dims: FlashBlockDims,
): void {
  const what = 'flashBlockBackward';
  const hs = checkDims(what, dims);
  const { b, c, nh } = dims;
  checkSize(what, 'q', q, [b, dims.q.rows, qLayoutOf(dims).width]);
  checkSize(what, 'kv', kv, [b, dims.kv.rows, kvLayoutOf(dims).width]);
  checkSize(what, 'dy', dy, [b, dims.q.rows, c]);
  checkSize(what, 'lse', lse, [b, nh, dims.q.rows]);
  checkSize(what, 'dsum', dsum, [b, nh, dims.q.rows]);
  const ins: [string, Tensor][] = [['q', q], ['kv', kv], ['dy', dy], ['lse', lse], ['dsum', dsum]];
  const read = [q, kv, dy, lse, dsum];
  if (grads.dq) {
    const l = grads.dqLayout ?? { width: 3 * c, offset: 0 };
    checkLayout(what, 'dqLayout', l, c, c);
    checkSize(what, 'dq', grads.dq, [b, dims.q.rows, l.width]);
    checkDistinct(what, [['dq', grads.dq]], ins);
    const dq = grads.dq;
    streamed(gpu, dims.kv.n, hs, (lo, hi) => dispatch(gpu, 'bdq', hs, dims, [...read, dq], { out: l, lo, hi }));
  }
  if (grads.dkv) {
    const l = grads.dkvLayout ?? { width: 3 * c, offset: c };
    checkLayout(what, 'dkvLayout', l, 2 * c, c);
    checkSize(what, 'dkv', grads.dkv, [b, dims.kv.rows, l.width]);
    checkDistinct(what, [['dkv', grads.dkv]], ins);
    const dkv = grads.dkv;
    streamed(gpu, dims.q.n, hs, (lo, hi) => dispatch(gpu, 'bdkv', hs, dims, [...read, dkv], { out: l, lo, hi }));
  }
}
