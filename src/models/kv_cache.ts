/**
 * The KV cache of incremental decoding (docs/design.md#decoding) and the model context that fills
 * and reads it. Every attention call of a pass is one layer (the context keys its cache by the
 * call's label, `transformer.h.{i}.attn`, and by how many calls of the pass had that label before
 * it: recurrent depth's r iterations of one core block are r layers), so the architectures need
 * no decoding code of their own: their pieces run over {@link cachedContext} instead of LOCAL
 * (docs/design.md#one-model-many-contexts). Recurrent layers ask the context for the buffers that carry their state
 * (ModelContext.carry: Mamba's conv window and scan state, the linear attention's token-shift
 * rows and wkv state), which the cache also holds.
 *
 * - Prefill (t ≥ 1 tokens on an empty cache): K and V of every token are appended, and the
 *   attention itself is the full forward's (FlashAttention or the T×T kernel), so the prefill's
 *   logits are the full forward's.
 * - Decode (t = 1 at position pos > 0): K and V of the new token are appended at pos, and its
 *   one query attends over the cached keys 0 … pos (kernels/decode_attention.ts).
 * The embedding reads the positional table from row pos on.
 */
import type { Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { decodeAttention, kvAppend, type KvCacheDims } from '../kernels/decode_attention.ts';
import { LOCAL, type ModelContext } from './context.ts';

/** One attention layer's cache: K and V, each (B, nh, Tmax, hs) f32. */
export interface LayerCache {
  k: Tensor;
  v: Tensor;
}

/**
 * Per-layer K and V buffers of B sequences decoded in lockstep (the same length in every row),
 * and the count of positions they hold. Buffers are allocated at a layer's first use and
 * zeroed; rows past {@link pos} are never read.
 */
export class KvCache {
  private readonly layers = new Map<string, LayerCache>();
  private readonly states = new Map<string, Tensor>();
  /** Positions cached so far (0 … pos−1 are valid); the next token goes to position pos. */
  pos = 0;

  /** @throws Error when a dimension is not a positive integer or nh does not divide C. */
  constructor(readonly gpu: Gpu, readonly dims: KvCacheDims) {
    for (const k of ['b', 'c', 'nh', 'tMax'] as const) {
      if (!Number.isInteger(dims[k]) || dims[k] < 1) {
        throw new Error(`KvCache: ${k} must be a positive integer, got ${dims[k]}`);
      }
    }
    if (dims.c % dims.nh !== 0) throw new Error(`KvCache: width ${dims.c} is not divisible by ${dims.nh} heads`);
  }

  /**
   * The cache of the attention layer keyed `label`, allocated (zeroed) on first use.
   * @param pos positions the pass starts at (this cache's own by default; a shard's group's)
   * @throws Error for a layer first met after the prefill (a pass with more attention layers
   *   than the prefill had).
   */
  layer(label: string, pos = this.pos): LayerCache {
    let l = this.layers.get(label);
    if (!l) {
      checkPrefilled(label, pos);
      const { b, c, nh, tMax } = this.dims, shape = [b, nh, tMax, c / nh];
      l = { k: this.gpu.zeros(shape, 'f32', `${label}.k_cache`), v: this.gpu.zeros(shape, 'f32', `${label}.v_cache`) };
      this.layers.set(label, l);
    }
    return l;
  }

  /**
   * The buffer carrying recurrent state `label` of `shape` (ModelContext.carry), allocated zeroed
   * in the prefill and kept between passes.
   * @param pos positions the pass starts at (as {@link layer}'s)
   * @throws Error for a state first asked for after the prefill, or with another shape.
   */
  state(label: string, shape: number[], pos = this.pos): Tensor {
    let s = this.states.get(label);
    if (!s) {
      checkPrefilled(label, pos);
      s = this.gpu.zeros(shape, 'f32', `${label}.state`);
      this.states.set(label, s);
    }
    if (s.shape.join() !== shape.join()) {
      throw new Error(`${label}: carried state [${shape}] asked for, but the cache holds [${s.shape}]`);
    }
    return s;
  }

  /** Recurrent states carried. */
  get stateCount(): number {
    return this.states.size;
  }

  /** Attention layers cached so far. */
  get layerCount(): number {
    return this.layers.size;
  }

  /** Bytes of all K and V buffers: 2·L·B·Tmax·C·4. */
  get bytes(): number {
    const { b, c, tMax } = this.dims;
    return this.layers.size * 2 * b * tMax * c * 4;
  }

  /**
   * @throws Error when `t` more positions do not fit (cache overflow), naming the limit.
   */
  checkFits(t: number): void {
    checkCacheFits(this.pos, t, this.dims.tMax);
  }

  /** Empties the cache (keeps the buffers; the carried states are zeroed, a prompt's start). */
  reset(): void {
    this.pos = 0;
    for (const s of this.states.values()) this.gpu.clear(s);
  }

  /** Hands every buffer back to the pool. */
  release(): void {
    for (const l of this.layers.values()) {
      l.k.release();
      l.v.release();
    }
    this.layers.clear();
    for (const s of this.states.values()) s.release();
    this.states.clear();
    this.pos = 0;
  }
}

/**
 * @throws Error when `t` more positions after `pos` do not fit a cache of `tMax` (overflow),
 *   naming the limit; for a cache or a shard's group (kv_shard.ts) alike.
 */
export function checkCacheFits(pos: number, t: number, tMax: number): void {
  if (pos + t > tMax) {
    throw new Error(
      `KV cache overflow: ${t} more token(s) after ${pos} cached positions exceed its ${tMax} positions (the model's block size at most); start over with a prefill of at most ${tMax} tokens`,
    );
  }
}

/** @throws Error when a layer or state is first met after the prefill, at position `pos` > 0. */
function checkPrefilled(label: string, pos: number): void {
  if (pos > 0) {
    throw new Error(
      `${label}: no cache from the prefill (this pass has a layer the prefill did not run, e.g. more recurrent-depth iterations); reset() and prefill again`,
    );
  }
}

/**
 * Cache keys of one pass's attention calls: the label, suffixed `#n` for its n-th repeat (n ≥ 1)
 * in the pass — recurrent depth runs one core block's attention once per iteration.
 */
export function passKeys(): (label: string) => string {
  const seen = new Map<string, number>();
  return (label) => {
    const n = seen.get(label) ?? 0;
    seen.set(label, n + 1);
    return n === 0 ? label : `${label}#${n}`;
  };
}

/**
 * The checks every cached attention pass makes before it touches its cache (this one, or a
 * rank's shard of one, kv_shard.ts).
 * @throws Error on a recording tape, for dims that are not the cache's, a multi-token pass after
 *   the prefill, or a pass past the cache's end.
 */
export function checkCachedPass(
  tape: { recording: boolean },
  dims: { b: number; c: number; nh: number; t: number },
  label: string,
  cache: { dims: { b: number; c: number; nh: number }; pos: number; checkFits(t: number): void },
): void {
  if (tape.recording) throw new Error(`${label}: KV-cache decoding runs on non-recording tapes only (no gradient)`);
  const { b, c, nh } = cache.dims;
  if (dims.b !== b || dims.c !== c || dims.nh !== nh) {
    throw new Error(
      `${label}: attention dims (B=${dims.b}, C=${dims.c}, nh=${dims.nh}) differ from the KV cache's (B=${b}, C=${c}, nh=${nh})`,
    );
  }
  if (dims.t > 1 && cache.pos !== 0) {
    throw new Error(
      `${label}: a ${dims.t}-token pass needs an empty KV cache (prefill); after it, decode one token per pass (${cache.pos} cached)`,
    );
  }
  cache.checkFits(dims.t);
}

/**
 * A model context over `base` (LOCAL: the single-rank model) whose attention appends to
 * `cache` and, for one new token, attends over it; whose embedding adds the positional rows
 * pos … pos+t−1; and which runs a recurrent mixer only over the state its layer carries.
 * The caller advances `cache.pos` by t after the pass. Inference only: recording tapes are refused.
 * @throws Error (from the pass) on a recording tape, a multi-token pass over a non-empty cache,
 *   a shape that is not the cache's, an overflow, or a recurrent mixer that carries no state.
 */
export function cachedContext(cache: KvCache, base: ModelContext = LOCAL): ModelContext {
  const key = passKeys();
  return {
    ...base,
    attention(tape, qkv, dims, label, naive) {
      checkCachedPass(tape, dims, label, cache);
      const kv = cache.layer(key(label));
      kvAppend(tape.gpu, qkv, kv.k, kv.v, cache.dims, dims.t, cache.pos);
      // Prefill: the full forward's kernel over the prompt, so its logits are the full forward's.
      if (dims.t > 1) return base.attention(tape, qkv, dims, label, naive);
      const { b, c } = cache.dims;
      const y = tape.alloc([b, 1, c], label); // (B, 1, C)
      decodeAttention(tape.gpu, qkv, kv.k, kv.v, y, cache.dims, cache.pos + 1);
      return y;
    },
    ...cachedPositions(cache, base, (label, shape) => cache.state(label, shape)),
  };
}

/**
 * The parts of a cached context that do not touch the cache's keys and values, shared by the
 * single-rank and the sharded cache (kv_shard.ts): the embedding adds positional rows
 * pos … pos+t−1; `carry` hands recurrent layers their state buffers from `state`, and a
 * recurrent mixer runs only when its layer asked for its state under the mixer's label (one
 * that did not would silently restart from zero every pass).
 * @throws Error (from the pass) for a recurrent mixer that carries no state, or t positions past
 *   the cache's end.
 */
export function cachedPositions(
  cache: { pos: number; checkFits(t: number): void },
  base: ModelContext,
  state: (label: string, shape: number[]) => Tensor,
): Pick<ModelContext, 'mixer' | 'embed' | 'carry'> {
  const carried = new Set<string>();
  return {
    carry(label, shape) {
      carried.add(label);
      return state(label, shape);
    },
    mixer(tape, inputs, core, label) {
      if (carried.has(label)) return base.mixer(tape, inputs, core, label);
      throw new Error(
        `${label}: cached decoding cannot run this recurrent mixer (it does not carry its state between passes); supported: attention, Mamba and linear-attention layers`,
      );
    },
    embed(tape, input, wte, positions, learned, b, t) {
      cache.checkFits(t);
      // Rows pos … pos+t−1 of the (Tmax, C) table as a (t, C) table: the embedding adds row i to token i.
      const c = positions.shape[1], rows = tape.alloc([t, c], 'positions');
      tape.gpu.copy(positions.range(cache.pos * c, t * c), rows);
      return base.embed(tape, input, wte, rows, learned, b, t);
    },
  };
}
