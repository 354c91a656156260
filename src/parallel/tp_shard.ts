/**
 * How Megatron tensor parallelism splits each parameter of src/models/gpt.ts over tp ranks
 * (see tensor_parallel.ts's module doc): the shard of every rank, its shape, and the inverse
 * that gathers shards back into the full tensor. Pure array arithmetic, no GPU.
 */
import { gptParamSpecs, type GPTConfig } from '../models/gpt.ts';
import type { ParamSpec } from '../nn/params.ts';

/** How a parameter is split: not at all, by vocabulary rows, by head rows of q/k/v, by rows, by columns. */
export type ShardKind = 'replicated' | 'vocab' | 'qkv' | 'rows' | 'cols';

/** The split of gpt.ts parameter `name` (see the module doc). */
export function shardKind(name: string): ShardKind {
  if (name === 'transformer.wte.weight') return 'vocab';
  if (/\.attn\.c_attn\.(weight|bias)$/.test(name)) return 'qkv';
  if (/\.mlp\.c_fc\.(weight|bias)$/.test(name)) return 'rows';
  if (/\.c_proj\.weight$/.test(name)) return 'cols';
  return 'replicated';
}

/** Element ranges [from, to) of the full row-major tensor `shape` that form rank r's shard, in shard order. */
function shardRanges(kind: ShardKind, shape: readonly number[], tp: number, r: number): [number, number][] {
  const rows = shape[0], width = shape.length > 1 ? shape[1] : 1;
  const block = (first: number, n: number): [number, number] => [first * width, (first + n) * width];
  if (kind === 'replicated') return [[0, rows * width]];
  if (kind === 'rows') return [block(r * rows / tp, rows / tp)];
  if (kind === 'qkv') return [0, 1, 2].map((k) => block(k * rows / 3 + r * rows / 3 / tp, rows / 3 / tp));
  if (kind === 'cols') return [...Array(rows).keys()].map((i) => [i * width + r * width / tp, i * width + (r + 1) * width / tp]);
  const n = Math.ceil(rows / tp); // vocab: rows past V are padding, clipped here and zero in the shard
  return [block(Math.min(rows, r * n), Math.max(0, Math.min(n, rows - r * n)))];
}

/**
 * The shard shape of a gpt.ts parameter of full shape `shape` (vocab: V is padded to a multiple of tp).
 * @throws Error when a split dimension is not divisible by tp.
 */
export function shardShape(kind: ShardKind, shape: readonly number[], tp: number): number[] {
  const [a, b] = shape;
  const div = (x: number, what: string) => {
    if (x % tp) throw new Error(`tensor parallel: ${what} ${x} is not divisible by tp ${tp}`);
    return x / tp;
  };
  if (kind === 'replicated') return [...shape];
  if (kind === 'vocab') return [Math.ceil(a / tp), b];
  if (kind === 'cols') return [a, div(b, 'in_features')];
  const rows = kind === 'qkv' ? 3 * div(a / 3, 'width C') : div(a, 'out_features');
  return shape.length > 1 ? [rows, b] : [rows];
}

/** Rank r's shard of a full parameter (vocab: padded rows are zero). */
export function shardParam(kind: ShardKind, full: Float32Array, shape: readonly number[], tp: number, r: number): Float32Array {
  const out = new Float32Array(shardShape(kind, shape, tp).reduce((x, y) => x * y, 1));
  let off = 0;
  for (const [from, to] of shardRanges(kind, shape, tp, r)) {
    out.set(full.subarray(from, to), off);
    off += to - from;
  }
  return out;
}

/** The full parameter from every rank's shard (inverse of {@link shardParam}; vocab padding dropped). */
export function unshardParam(kind: ShardKind, shards: Float32Array[], shape: readonly number[]): Float32Array {
  const out = new Float32Array(shape.reduce((x, y) => x * y, 1));
  if (kind === 'replicated') {
    out.set(shards[0]);
    return out;
  }
  shards.forEach((s, r) => {
    let off = 0;
    for (const [from, to] of shardRanges(kind, shape, shards.length, r)) {
      out.set(s.subarray(off, off + to - from), from);
      off += to - from;
    }
  });
  return out;
}

/** gpt.ts's parameter declarations with every shape replaced by rank-local shard shapes. */
export function tpParamSpecs(cfg: GPTConfig, tp: number): ParamSpec[] {
  return gptParamSpecs(cfg).map((s) => ({ ...s, shape: shardShape(shardKind(s.name), s.shape, tp) }));
}
