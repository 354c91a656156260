/**
 * Decode attention across a context-parallel group (docs/design.md#tree-attention-decoding): the KV cache is cut along
 * T into contiguous shards, one per rank of the cp group; the query row is replicated on every
 * rank; each rank computes the partial (m, ℓ, o) over its shard (decode_attention.ts
 * `decodeAttentionPartial`) and the partials are merged, O = Σ e^{m_i − M}·o_i / Σ e^{m_i − M}·ℓ_i.
 *
 * - Tree decode (Shyam et al., "Tree Attention", arXiv 2408.04093): that merge is an associative
 *   reduction, so it is two allReduces, max of m then sum of the rescaled [ℓ, o] in one message:
 *   2·⌈lg p⌉ rounds with a tree algorithm (recursive doubling by default).
 * - Ring decode, the baseline: every rank's partial travels around the ring (rank r sends to
 *   r + 1, receives from r − 1, forwards what it received) and each rank merges what arrives into
 *   its own: p − 1 sequential hops of B·nh·(hs + 2) floats, the ring-attention schedule with the
 *   partial state in place of the KV blocks (which would cost bytes ∝ T, docs/design.md#tree-attention-decoding).
 *
 * Both leave the output y (B, C) on every rank. Partials live on the host: the collectives run on
 * host arrays, as TensorComm does for GPU tensors (docs/design.md#ranks-and-the-collective-layer). Partial layout (B,
 * nh, hs + 2), per (b, h) the row [m, ℓ, o_0 … o_{hs−1}].
 */
import type { Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import type { Communicator } from '../comm/communicator.ts';
import type { Algorithm } from '../comm/call_options.ts';
import { chunkOffsets } from '../comm/algorithms.ts';
import { collectiveTraffic } from '../comm/cost.ts';
import { decodeAttentionPartial, type KvCacheDims } from '../kernels/decode_attention.ts';

/** How the partials of the cp ranks are merged. */
export type DecodeCombine = 'tree' | 'ring';

/** Shape of one partial: batch, heads, head size. */
export interface PartialDims {
  b: number;
  nh: number;
  hs: number;
}

/** Options of the merge. */
export interface CombineOptions {
  /**
   * Tree decode's allReduce algorithm (default recursive doubling: ⌈lg p⌉ rounds,
   * docs/design.md#the-network-model-the-simulated-clock-and-collective-costs).
   */
  algorithm?: Algorithm;
}

/** The tree decode's default allReduce: latency-optimal for messages of a few hundred bytes. */
export const TREE_DEFAULT_ALGORITHM: Algorithm = 'recursive-doubling';

const RING_TAG = 36;

/**
 * The contiguous shard of a context of `t` positions that group rank `r` of `p` holds: positions
 * start … start + len − 1, the first t mod p ranks one longer (chunkOffsets,
 * docs/design.md#ranks-and-the-collective-layer); len may be 0.
 * @throws Error for a negative t, p < 1 or r outside 0 … p − 1.
 */
export function decodeShard(t: number, p: number, r: number): { start: number; len: number } {
  if (!Number.isInteger(t) || t < 0 || !Number.isInteger(p) || p < 1 || !Number.isInteger(r) || r < 0 || r >= p) {
    throw new Error(`decodeShard: need integers t ≥ 0, p ≥ 1, 0 ≤ r < p; got t ${t}, p ${p}, r ${r}`);
  }
  const offs = chunkOffsets(t, p);
  return { start: offs[r], len: offs[r + 1] - offs[r] };
}

/** The merge's identity, what a rank with an empty shard contributes: m = −∞, ℓ = 0, o = 0. */
export function emptyPartial(d: PartialDims): Float32Array {
  const w = d.hs + 2, out = new Float32Array(d.b * d.nh * w);
  for (let r = 0; r < d.b * d.nh; r++) out[r * w] = -Infinity;
  return out;
}

function checkPartial(what: string, partial: Float32Array, d: PartialDims): void {
  const want = d.b * d.nh * (d.hs + 2);
  if (partial.length !== want) {
    throw new Error(`${what}: the partial has ${partial.length} floats, expected B·nh·(hs + 2) = ${want}`);
  }
}

/**
 * Folds partial `src` into `acc` (both (B, nh, hs + 2)), the LSE merge of docs/design.md#tree-attention-decoding, row
 * by row.
 */
export function mergePartial(acc: Float32Array, src: Float32Array, d: PartialDims): void {
  const w = d.hs + 2;
  for (let r = 0; r < d.b * d.nh; r++) {
    const ma = acc[r * w], ms = src[r * w];
    if (ms === -Infinity) continue; // an empty shard: nothing to add
    const m = Math.max(ma, ms), fa = Math.exp(ma - m), fs = Math.exp(ms - m);
    acc[r * w] = m;
    for (let i = 1; i < w; i++) acc[r * w + i] = fa * acc[r * w + i] + fs * src[r * w + i];
  }
}

/**
 * y (B, C) = o/ℓ of a merged partial (B, nh, hs + 2).
 * @throws Error when a row has ℓ = 0 (no key in the whole context).
 */
export function finishPartial(partial: Float32Array, d: PartialDims): Float32Array {
  const w = d.hs + 2, y = new Float32Array(d.b * d.nh * d.hs);
  for (let r = 0; r < d.b * d.nh; r++) {
    const l = partial[r * w + 1];
    if (!(l > 0)) throw new Error(`decode combine: row ${r} (b·nh + h) has no cached key in any shard (ℓ = ${l})`);
    for (let i = 0; i < d.hs; i++) y[r * d.hs + i] = partial[r * w + 2 + i] / l;
  }
  return y;
}

/**
 * Tree decode's merge (arXiv 2408.04093): allReduce(max) of m (B·nh floats), each rank
 * rescales ℓ and o by e^{m − M}, allReduce(sum) of [ℓ, o] (B·nh·(hs + 1) floats, one message).
 * Every rank of `comm` must call it with partials of the same shape.
 * @param partial (B, nh, hs + 2) this rank's partial (not modified)
 * @returns y (B, C) on every rank
 * @throws Error for a partial of the wrong length, or when no rank holds a key.
 */
export async function treeDecodeCombine(
  comm: Communicator,
  partial: Float32Array,
  d: PartialDims,
  opts: CombineOptions = {},
): Promise<Float32Array> {
  checkPartial('treeDecodeCombine', partial, d);
  const algorithm = opts.algorithm ?? TREE_DEFAULT_ALGORITHM;
  const rows = d.b * d.nh, w = d.hs + 2;
  const m = new Float32Array(rows);
  for (let r = 0; r < rows; r++) m[r] = partial[r * w];
  await comm.allReduce(m, { op: 'max', algorithm });
  const ls = new Float32Array(rows * (d.hs + 1));
  for (let r = 0; r < rows; r++) {
    // M = −∞ only when every shard is empty (finishPartial refuses it); an empty shard adds 0.
    const f = partial[r * w] === -Infinity ? 0 : Math.exp(partial[r * w] - m[r]);
    for (let i = 0; i <= d.hs; i++) ls[r * (d.hs + 1) + i] = f * partial[r * w + 1 + i];
  }
  await comm.allReduce(ls, { op: 'sum', algorithm });
  const merged = new Float32Array(rows * w);
  for (let r = 0; r < rows; r++) {
    merged[r * w] = m[r];
    merged.set(ls.subarray(r * (d.hs + 1), (r + 1) * (d.hs + 1)), r * w + 1);
  }
  return finishPartial(merged, d);
}

/**
 * Ring decode's merge: p − 1 steps; at step i rank r sends the partial it holds (its own at step 1,
 * then the one that came from r − i + 1) to r + 1, receives the partial of rank r − i from r − 1
 * and merges it into its accumulator. Every rank of `comm` must call it.
 * @param partial (B, nh, hs + 2) this rank's partial (not modified)
 * @returns y (B, C) on every rank
 * @throws Error for a partial of the wrong length, or when no rank holds a key.
 */
export async function ringDecodeCombine(
  comm: Communicator,
  partial: Float32Array,
  d: PartialDims,
): Promise<Float32Array> {
  checkPartial('ringDecodeCombine', partial, d);
  const p = comm.size, next = (comm.rank + 1) % p, prev = (comm.rank + p - 1) % p;
  const acc = partial.slice();
  let held = partial;
  for (let i = 1; i < p; i++) {
    await comm.send(held, next, { tag: RING_TAG });
    held = await comm.recv(new Float32Array(partial.length), prev, { tag: RING_TAG });
    mergePartial(acc, held, d);
  }
  return finishPartial(acc, d);
}

/** Runs `method`'s merge of this rank's partial. */
export function decodeCombine(
  method: DecodeCombine,
  comm: Communicator,
  partial: Float32Array,
  d: PartialDims,
  opts: CombineOptions = {},
): Promise<Float32Array> {
  return method === 'tree' ? treeDecodeCombine(comm, partial, d, opts) : ringDecodeCombine(comm, partial, d);
}

/**
 * Decode attention of one query row per (b, h) over a cache sharded across `comm`'s ranks: this
 * rank's partial over its `shardLen` cached positions (the decode kernel; the identity when the
 * shard is empty), read back and merged with `method`. Equals decodeAttention over the whole cache.
 * @param qkv (B, 1, 3C) the query (replicated on every rank; only q is read)
 * @param kShard (B, nh, Tmax_shard, hs) this rank's keys, positions in order; @param vShard the same
 * @returns y (B, C) on every rank
 * @throws Error as decodeAttentionPartial (shardLen in 0 … Tmax_shard) and the merge.
 */
export async function shardedDecodeAttention(
  gpu: Gpu,
  comm: Communicator,
  qkv: Tensor,
  kShard: Tensor,
  vShard: Tensor,
  dims: KvCacheDims,
  shardLen: number,
  method: DecodeCombine,
  opts: CombineOptions = {},
): Promise<Float32Array> {
  const d = { b: dims.b, nh: dims.nh, hs: dims.c / dims.nh };
  let partial = emptyPartial(d);
  if (shardLen !== 0) {
    const out = gpu.empty([d.b, d.nh, d.hs + 2], 'f32', 'tree_decode.partial');
    try {
      decodeAttentionPartial(gpu, qkv, kShard, vShard, out, dims, shardLen);
      partial = Float32Array.from(await gpu.read(out));
    } finally {
      out.release();
    }
  }
  return await decodeCombine(method, comm, partial, d, opts);
}

/**
 * Bytes group rank `r` of `p` sends per (layer, token) merging one decode step
 * (docs/design.md#tree-attention-decoding): tree: allReduce of B·nh floats + allReduce of B·nh·(hs + 1) floats, each as
 * `algorithm` moves it (collectiveTraffic, docs/design.md#the-network-model-the-simulated-clock-and-collective-costs;
 * recursive doubling on p = 2^k: lg p·B·nh·(hs + 2)·4); ring: (p − 1)·B·nh·(hs + 2)·4.
 * @throws Error for a bad p or r, or an algorithm allReduce does not accept.
 */
export function decodeCombineBytes(
  method: DecodeCombine,
  d: PartialDims,
  p: number,
  r: number,
  algorithm: Algorithm = TREE_DEFAULT_ALGORITHM,
): number {
  const rows = d.b * d.nh;
  if (method === 'ring') {
    collectiveTraffic('allReduce', 'direct', 0, p, r); // argument checks
    return 4 * (p - 1) * rows * (d.hs + 2);
  }
  const sent = (n: number) => collectiveTraffic('allReduce', algorithm, n, p, r).elements;
  return 4 * (sent(rows) + sent(rows * (d.hs + 1)));
}
