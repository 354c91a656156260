/**
 * Text generation from a trained model (nanoGPT generate()): the next token is drawn from
 * softmax(logits / temperature) restricted to the top-k, over the real vocabulary only (a
 * --pad-vocab model's padded ids are never produced). The context is the last blockSize
 * tokens, as nanoGPT crops it.
 *
 * Two ways to get the logits, giving the same tokens for the same seed (tests/train/sample_cache.test.ts):
 * - {@link sampleCached}: a KV-cache decoder (models/decode.ts, docs/design.md#decoding) prefills
 *   the prompt and then runs the model on one new token per step; once the context is longer
 *   than blockSize the window slides, every position moves, and each step prefills the window
 *   again (what the recompute path does at every step);
 * - {@link sampleRecompute}: the full forward over the context padded to (1, blockSize) for
 *   every token (causality makes the padding invisible); the path of top-k attention, and of any
 *   architecture without a decoding form (none in the registry since the linear attention
 *   carries its state, docs/design.md#decoding-state-of-the-recurrent-layers).
 */
import type { Gpu } from '../gpu/context.ts';
import { Tape } from '../autograd/tape.ts';
import type { Autocast } from '../autograd/autocast.ts';
import { type LanguageModel, logitsOf, realVocabOf } from '../models/model.ts';
import { kvCacheSupported, KvDecoder } from '../models/decode.ts';
import type { Random } from '../util/random.ts';

/** How tokens are drawn, and the linear layers' precision (the training run's). */
export interface SampleOptions {
  temperature: number;
  /** 0 = no top-k filter. */
  topK: number;
  autocast: Autocast | null;
  /**
   * Top-k attention at inference (`--topk-attention`, docs/design.md#top-k-attention-at-inference); null attends to all
   * keys.
   */
  topkAttention?: number | null;
}

/** Samples an index from logits with temperature and top-k (nanoGPT generate()). */
export function pick(logits: Float32Array, temperature: number, topK: number, rng: Random): number {
  const v = Array.from(logits, (x) => x / temperature);
  if (topK > 0 && topK < v.length) {
    const kth = [...v].sort((a, b) => b - a)[topK - 1];
    for (let i = 0; i < v.length; i++) if (v[i] < kth) v[i] = -Infinity;
  }
  const m = Math.max(...v);
  const p = v.map((x) => Math.exp(x - m));
  const s = p.reduce((a, b) => a + b, 0);
  let r = rng.uniform() * s;
  for (let i = 0; i < p.length; i++) {
    r -= p[i];
    if (r <= 0) return i;
  }
  return p.length - 1;
}

/**
 * `n` tokens after `prompt` (host ids; empty = one token 0): with the KV cache where the
 * architecture has one ({@link kvCacheSupported}), else by recomputing the context. Top-k
 * attention recomputes too: its select-k runs in the materialised kernel, not the decode one.
 */
export function sampleTokens(
  gpu: Gpu,
  model: LanguageModel,
  prompt: Int32Array,
  n: number,
  rng: Random,
  o: SampleOptions,
): Promise<Int32Array> {
  return kvCacheSupported(model) && !o.topkAttention
    ? sampleCached(model, prompt, n, rng, o)
    : sampleRecompute(gpu, model, prompt, n, rng, o);
}

/**
 * {@link sampleTokens} with a KV-cache decoder: a prefill, then one single-token pass per token
 * while the context fits blockSize; past it, a prefill of the last blockSize tokens per token.
 * @throws Error when the architecture has no KV-cache decoding (models/decode.ts KV_CACHE_ARCHS).
 */
export async function sampleCached(
  model: LanguageModel,
  prompt: Int32Array,
  n: number,
  rng: Random,
  o: SampleOptions,
): Promise<Int32Array> {
  if (n < 1) return new Int32Array(0);
  const T = model.cfg.blockSize, real = realVocabOf(model.cfg);
  const ids = Array.from(prompt.length ? prompt : [0]);
  const out: number[] = [];
  const dec = new KvDecoder(model, { autocast: o.autocast });
  try {
    let logits = await dec.prefill(Int32Array.from(ids.slice(-T)));
    for (let k = 0; k < n; k++) {
      const next = pick(logits.subarray(0, real), o.temperature, o.topK, rng);
      ids.push(next);
      out.push(next);
      if (k === n - 1) break;
      if (ids.length <= T) logits = await dec.step(Int32Array.of(next));
      else {
        // The window slides: every cached position would move, so the cache starts over.
        dec.reset();
        logits = await dec.prefill(Int32Array.from(ids.slice(-T)));
      }
    }
  } finally {
    dec.release();
  }
  return Int32Array.from(out);
}

/** {@link sampleTokens} by a full forward over the context, padded to (1, blockSize), per token. */
export async function sampleRecompute(
  gpu: Gpu,
  model: LanguageModel,
  prompt: Int32Array,
  n: number,
  rng: Random,
  o: SampleOptions,
): Promise<Int32Array> {
  const T = model.cfg.blockSize;
  const V = model.cfg.vocabSize, real = realVocabOf(model.cfg); // row stride V' ≥ real ids
  const ids = Array.from(prompt.length ? prompt : [0]);
  const ctx = gpu.zeros([1, T], 'i32', 'sample_ctx');
  const out: number[] = [];
  try {
    for (let k = 0; k < n; k++) {
      const window = ids.slice(-T);
      const host = new Int32Array(T);
      host.set(window);
      gpu.write(ctx, host);
      const tape = new Tape(gpu, new Map(), false);
      tape.autocast = o.autocast;
      tape.topk = o.topkAttention ?? null;
      try {
        const logits = logitsOf(await model.forward(tape, ctx, host, null, 1, T), 'sample');
        const row = await gpu.read(logits.range((window.length - 1) * V, real));
        const next = pick(row as Float32Array, o.temperature, o.topK, rng);
        ids.push(next);
        out.push(next);
      } finally {
        tape.dispose();
      }
    }
  } finally {
    ctx.release();
  }
  return Int32Array.from(out);
}
