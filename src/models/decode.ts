/**
 * Incremental decoding with a cache for the single-rank model (docs/design.md#decoding): a
 * prefill over the prompt, then one token per step, each step running the model on the new
 * token only. Logits equal the full forward's at the same position (tests/models/kv_cache.test.ts).
 *
 * Supported ({@link KV_CACHE_ARCHS}, every architecture of the registry): attention layers cache
 * K and V; Mamba layers carry their conv window and scan state; the linear attention's layers
 * carry the previous token's row of each token shift and the wkv state; recurrent depth caches
 * every iteration of its core.
 */
import type { Gpu } from '../gpu/context.ts';
import { Tape } from '../autograd/tape.ts';
import type { Autocast } from '../autograd/autocast.ts';
import type { GPT } from './gpt.ts';
import { type LanguageModel, type LayeredModel, runPieces } from './model.ts';
import type { ModelContext, ModelInput } from './context.ts';
import type { MoEContext, MoELanguageModel } from './moe_layer.ts';
import { cachedContext, KvCache } from './kv_cache.ts';
import { type CacheShardOptions, shardedCachedContext, ShardedKvCache } from './kv_shard.ts';
import { variableDepth } from './recurrence.ts';

/** Architectures the KV-cache decoder runs: every mixer of theirs caches K and V or carries its state. */
export const KV_CACHE_ARCHS: readonly string[] = [
  'gpt',
  'gpt-moe',
  'mamba',
  'hybrid',
  'mamba-moe',
  'recurrent-depth',
  'linear',
];

/** Whether {@link KvDecoder} runs `model` (else a caller recomputes the full context). */
export function kvCacheSupported(model: LanguageModel): boolean {
  return KV_CACHE_ARCHS.includes(model.arch);
}

/** Options of a decoder. */
export interface DecoderOptions {
  /** Sequences B decoded in lockstep. Default 1. */
  batch?: number;
  /** Positions the cache holds; at most, and by default, the model's block size. */
  tMax?: number;
  /** Mixed precision of the linear layers (autograd/autocast.ts), as the training run's. Default none. */
  autocast?: Autocast | null;
  /**
   * Shard the cache along T across this cp group, merging with tree or ring decode
   * (docs/design.md#tree-attention-decoding); every rank of the group runs the same decoder calls. Default: the whole
   * cache on this rank.
   */
  cp?: CacheShardOptions;
}

/**
 * Prefill, then one token per step, over a {@link KvCache} of every attention layer (and the
 * carried state of every recurrent layer). Bytes of cache read per decoded token: 2·L·pos·C·4 per
 * sequence over L attention layers (docs/design.md#decoding-with-a-kv-cache), plus the states
 * (docs/design.md#decoding-state-of-the-recurrent-layers): L·D·(K − 1 + N)·4 over L Mamba layers, L·(2C + H·K·V)·4 over
 * L linear-attention layers.
 */
export class KvDecoder {
  /** This rank's cache: the whole of it, or (with `cp`) this rank's shard. */
  readonly cache: KvCache;
  /** With `cp`: the sharded cache whose `shard` is {@link cache}. */
  readonly sharded: ShardedKvCache | null;
  readonly batch: number;
  private readonly gpu: Gpu;
  private readonly autocast: Autocast | null;
  /** Recurrent depth's r at the prefill: the cache holds r iterations of the core, so steps must run r. */
  private depth: number | null = null;

  /**
   * @throws Error naming the architecture when it is not one of {@link KV_CACHE_ARCHS}, when
   *   tMax is outside 1 … blockSize or batch is not a positive integer, or for a MoE model
   *   holding a shard of the experts.
   */
  constructor(readonly model: LanguageModel, opts: DecoderOptions = {}) {
    if (!kvCacheSupported(model)) {
      throw new Error(
        `KV-cache decoding: arch '${model.arch}' is not supported (no decoding form carries its layers' state between tokens); supported: ${
          KV_CACHE_ARCHS.join(', ')
        }`,
      );
    }
    const m = model as GPT, block = m.cfg.blockSize, nh = (m.cfg as { nHead?: number }).nHead ?? 1;
    const tMax = opts.tMax ?? block, b = opts.batch ?? 1;
    if (!Number.isInteger(tMax) || tMax < 1 || tMax > block) {
      throw new Error(`KV-cache decoding: tMax must be an integer in 1 … ${block} (the block size), got ${tMax}`);
    }
    if (!Number.isInteger(b) || b < 1) throw new Error(`KV-cache decoding: batch must be a positive integer, got ${b}`);
    const moe = model as Partial<MoELanguageModel>;
    if (moe.shard && moe.moe && moe.shard.count !== moe.moe.nExpert) {
      throw new Error(
        `KV-cache decoding: this ${model.arch} model holds a shard of the experts; decode needs all of them`,
      );
    }
    this.gpu = m.gpu;
    this.batch = b;
    this.autocast = opts.autocast ?? null;
    const dims = { b, c: m.cfg.nEmbd, nh, tMax };
    this.sharded = opts.cp ? new ShardedKvCache(m.gpu, dims, opts.cp) : null;
    this.cache = this.sharded?.shard ?? new KvCache(m.gpu, dims);
  }

  /** Positions cached: the next token is decoded at this position. */
  get position(): number {
    return this.sharded?.pos ?? this.cache.pos;
  }

  private set position(pos: number) {
    if (this.sharded) this.sharded.pos = pos;
    else this.cache.pos = pos;
  }

  /**
   * Runs the prompt (B, t) (host ids, row-major) on an empty cache and fills it.
   * @returns the logits (B, V) at each row's last position (V = the model's vocabSize, padding included)
   * @throws Error when the cache is not empty (call {@link reset}), or t exceeds tMax.
   */
  async prefill(tokens: Int32Array): Promise<Float32Array> {
    if (this.position !== 0) {
      throw new Error(`KvDecoder.prefill: the cache holds ${this.position} positions; reset() before a new prompt`);
    }
    const t = tokens.length / this.batch;
    if (!Number.isInteger(t) || t < 1) {
      throw new Error(`KvDecoder.prefill: ${tokens.length} ids are not B=${this.batch} rows of ≥ 1 token`);
    }
    this.depth = variableDepth(this.model)?.iterations ?? null;
    return await this.pass(tokens, t);
  }

  /**
   * Decodes one token per row: ids (B) at position {@link position}.
   * @returns the logits (B, V) at that position
   * @throws Error when nothing was prefilled, ids is not (B), the cache is full (overflow), or a
   *   recurrent-depth model runs another number of core iterations than at the prefill.
   */
  async step(ids: Int32Array): Promise<Float32Array> {
    if (this.position === 0) throw new Error('KvDecoder.step: prefill a prompt first');
    if (ids.length !== this.batch) throw new Error(`KvDecoder.step: ${ids.length} ids for B=${this.batch} rows`);
    const r = variableDepth(this.model)?.iterations ?? null;
    if (r !== this.depth) {
      throw new Error(
        `KvDecoder.step: the prefill cached ${this.depth} core iterations but the model now runs ${r}; reset() and prefill again to change --eval-iterations`,
      );
    }
    return await this.pass(ids, 1);
  }

  /** Empties the cache for a new prompt. */
  reset(): void {
    this.cache.reset();
    this.position = 0;
  }

  /** Releases the cache's buffers. */
  release(): void {
    this.cache.release();
    this.position = 0;
  }

  private async pass(ids: Int32Array, t: number): Promise<Float32Array> {
    (this.sharded ?? this.cache).checkFits(t);
    const b = this.batch, V = this.model.cfg.vocabSize;
    const tape = new Tape(this.gpu, new Map(), false);
    tape.autocast = this.autocast;
    try {
      let ctx: ModelContext = this.sharded ? shardedCachedContext(this.sharded) : cachedContext(this.cache);
      const moe = this.model as Partial<MoELanguageModel>;
      // A MoE model's context carries its MoE MLP (moe_layer.ts MoEContext), every expert local.
      if (moe.moeLayers) ctx = { ...ctx, moe: (call) => moe.moeLayers!.local(call.tape, call) } as MoEContext;
      const input: ModelInput = { hostTokens: ids, tokens: null, targets: null, hostTargets: null };
      const r = await runPieces(this.model as LayeredModel, ctx, tape, input, b, t);
      if (!r.logits) throw new Error('KvDecoder: the forward returned no logits');
      const out = new Float32Array(b * V);
      for (let row = 0; row < b; row++) {
        const last = r.logits.range(((row + 1) * t - 1) * V, V);
        out.set(await this.gpu.read(last) as Float32Array, row * V);
      }
      this.position += t;
      return out;
    } finally {
      tape.dispose();
    }
  }
}
