/**
 * A KV cache sharded along T across a context-parallel group, and the model context that decodes
 * over it with tree or ring decode (docs/design.md#tree-attention-decoding). Every rank of the group runs the whole
 * model on the same tokens (weights, the query and recurrent layers' carried states replicated);
 * only K and V are split: rank r
 * holds positions start_r … start_r + cap_r − 1 of every layer, the contiguous part of Tmax that
 * chunkOffsets gives it (docs/design.md#ranks-and-the-collective-layer), so it fills once the ranks before it are full.
 * A decode step appends the new token's K and V on the rank that owns its position, every rank computes its partial
 * over what it holds (ragged lengths; nothing yet on the later ranks) and the partials are merged
 * (src/models/tree_decode.ts), so the logits equal single-rank decoding's.
 */
import type { Gpu } from '../gpu/context.ts';
import { kvAppend, type KvCacheDims } from '../kernels/decode_attention.ts';
import { LOCAL, type ModelContext } from './context.ts';
import { cachedPositions, checkCachedPass, checkCacheFits, KvCache, passKeys } from './kv_cache.ts';
import type { Communicator } from '../comm/communicator.ts';
import type { Algorithm } from '../comm/call_options.ts';
import { type DecodeCombine, decodeShard, shardedDecodeAttention } from './tree_decode.ts';

/** How a decoder shards its cache: the cp group, and how partials are merged. */
export interface CacheShardOptions {
  /** The context-parallel group (every member decodes the same tokens in lockstep). */
  comm: Communicator;
  method: DecodeCombine;
  /** Tree decode's allReduce algorithm (default recursive doubling). */
  algorithm?: Algorithm;
}

/**
 * This rank's shard of a (B, nh, Tmax, hs) cache per layer: `shard` holds positions start …
 * start + cap − 1 (at least one row is allocated, so a rank with cap = 0 has a never-read row).
 */
export class ShardedKvCache {
  readonly shard: KvCache;
  /** First global position this rank holds, and how many it may hold. */
  readonly start: number;
  readonly cap: number;
  /** Global positions cached so far on the group. */
  pos = 0;

  /** @throws Error for bad dims (as KvCache). */
  constructor(gpu: Gpu, readonly dims: KvCacheDims, readonly opts: CacheShardOptions) {
    const { start, len } = decodeShard(dims.tMax, opts.comm.size, opts.comm.rank);
    this.start = start;
    this.cap = len;
    this.shard = new KvCache(gpu, { ...dims, tMax: Math.max(len, 1) });
  }

  /** Positions of the first `pos` that this rank holds. */
  held(pos: number): number {
    return Math.min(Math.max(pos - this.start, 0), this.cap);
  }

  /** Bytes of this rank's K and V buffers: 2·L·B·cap·C·4. */
  get bytes(): number {
    return this.shard.bytes;
  }

  /** @throws Error when `t` more positions do not fit the group's Tmax (overflow). */
  checkFits(t: number): void {
    checkCacheFits(this.pos, t, this.dims.tMax);
  }
}

/**
 * cachedContext (kv_cache.ts) over a sharded cache: a prefill runs the model's own attention and
 * keeps this rank's positions of K and V; a one-token pass appends on the owning rank and merges
 * the ranks' partials. The caller advances `cache.pos` by t after the pass. Every rank of the
 * group must run the same passes.
 * @throws Error (from the pass) as cachedContext does.
 */
export function shardedCachedContext(cache: ShardedKvCache, base: ModelContext = LOCAL): ModelContext {
  const { comm, method, algorithm } = cache.opts, key = passKeys();
  return {
    ...base,
    async attention(tape, qkv, dims, label, naive) {
      checkCachedPass(tape, dims, label, cache);
      const kv = cache.shard.layer(key(label), cache.pos), sd = cache.shard.dims;
      // This rank's positions among pos … pos + t − 1, appended at their place in the shard.
      const from = cache.held(cache.pos), to = cache.held(cache.pos + dims.t);
      if (to > from) kvAppend(tape.gpu, qkv, kv.k, kv.v, sd, to - from, from, cache.start + from - cache.pos);
      if (dims.t > 1) return base.attention(tape, qkv, dims, label, naive);
      const y = await shardedDecodeAttention(tape.gpu, comm, qkv, kv.k, kv.v, sd, to, method, { algorithm });
      const { b, c } = cache.dims;
      const out = tape.alloc([b, 1, c], label); // (B, 1, C)
      tape.gpu.write(out, y);
      return out;
    },
    // A recurrent layer's state is the whole model's on every rank (same tokens, same weights).
    ...cachedPositions(cache, base, (label, shape) => cache.shard.state(label, shape, cache.pos)),
  };
}
