/**
 * Sampling benchmark: tokens/s of `sample` with the decoding cache (one single-token pass per new
 * token, docs/design.md#decoding) against recomputing the whole (1, blockSize) context for every
 * token, per architecture, on one device. The two paths alternate in rounds, so their ratio holds
 * when a busy CPU-WebGPU machine makes absolute times wander (docs/design.md#runtime-quirks); each round also checks
 * that both drew the same tokens, which is what makes the comparison fair.
 */
import type { Gpu } from '../gpu/context.ts';
import { createModel } from '../models/registry.ts';
import { KV_CACHE_ARCHS } from '../models/decode.ts';
import { MOE_ARCHS } from '../models/archs.ts';
import { parseConfig, type TrainConfig } from '../train/config.ts';
import { sampleCached, sampleRecompute } from '../train/sample.ts';
import { Random } from '../util/random.ts';

/** One architecture's figures. */
export interface SampleBenchRow {
  arch: string;
  /** The model's context (block size). */
  blockSize: number;
  params: number;
  /** Prompt tokens and generated tokens per call. */
  prompt: number;
  tokens: number;
  /** Median tokens/s over the rounds. */
  cachedTokensPerSec: number;
  recomputeTokensPerSec: number;
  /** cached / recompute tokens/s. */
  speedup: number;
  /** Whether every round's two paths drew the same tokens. */
  sameTokens: boolean;
}

/** Options of {@link benchSample}. */
export interface SampleBenchOptions {
  /** Architectures (default: every one with a decoding cache). */
  archs?: string[];
  /** Width, depth and context of the models (defaults 64, 2, 128). */
  nEmbd?: number;
  nLayer?: number;
  blockSize?: number;
  /** Prompt length and tokens generated per call (defaults 16, 48). */
  prompt?: number;
  tokens?: number;
  /** Timed rounds of both paths (default 3, after one warm-up round). */
  rounds?: number;
}

const VOCAB = 65;

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1];

/**
 * Times both sampling paths for each architecture with decoding support (untrained weights: the
 * cost of a token does not depend on them). Temperature 1, no top-k.
 * @throws Error for an architecture without a decoding cache, or options outside their ranges.
 */
export async function benchSample(gpu: Gpu, o: SampleBenchOptions = {}): Promise<SampleBenchRow[]> {
  const archs = o.archs ?? [...KV_CACHE_ARCHS];
  const missing = archs.filter((a) => !KV_CACHE_ARCHS.includes(a));
  if (missing.length) {
    throw new Error(`benchSample: no decoding cache for ${missing.join(', ')}; allowed: ${KV_CACHE_ARCHS.join(', ')}`);
  }
  const { nEmbd = 64, nLayer = 2, blockSize = 128, prompt = 16, tokens = 48, rounds = 3 } = o;
  if (prompt < 1 || tokens < 1 || prompt + tokens > blockSize || rounds < 1) {
    throw new Error(
      `benchSample: need prompt ≥ 1, tokens ≥ 1, prompt + tokens ≤ blockSize (${blockSize}) and rounds ≥ 1; got prompt ${prompt}, tokens ${tokens}, rounds ${rounds}`,
    );
  }
  const rows: SampleBenchRow[] = [];
  for (const arch of archs) {
    const shape: Partial<TrainConfig> = { arch: arch as TrainConfig['arch'], nEmbd, nHead: 4, blockSize, nLayer };
    // Recurrent depth: one prelude, one core block iterated 2 times, one coda.
    if (arch === 'recurrent-depth') Object.assign(shape, { nLayer: 3, evalIterations: 2 });
    // MoE: capacity factor E/k, so the recompute pass drops no token and both paths route alike
    // (docs/design.md#decoding-with-a-kv-cache).
    const parsed = parseConfig(shape), moe = MOE_ARCHS.includes(parsed.arch);
    const cfg = moe ? parseConfig({ ...shape, capacityFactor: parsed.nExpert / parsed.moeTopK }) : parsed;
    const model = createModel(gpu, cfg, VOCAB, 1);
    const ids = Int32Array.from({ length: prompt }, (_, i) => (i * 7) % VOCAB);
    const opts = { temperature: 1, topK: 0, autocast: null };
    const time = async (cached: boolean, seed: number) => {
      const t0 = performance.now();
      const out = cached
        ? await sampleCached(model, ids, tokens, new Random(seed), opts)
        : await sampleRecompute(gpu, model, ids, tokens, new Random(seed), opts);
      return { out, ms: performance.now() - t0 };
    };
    const cachedRate: number[] = [], recomputeRate: number[] = [];
    let same = true;
    try {
      for (let r = 0; r <= rounds; r++) {
        const a = await time(true, r), b = await time(false, r);
        same &&= a.out.every((x, i) => x === b.out[i]);
        if (r === 0) continue; // warm-up: pipelines compile, the pool fills
        cachedRate.push(tokens / (a.ms / 1000));
        recomputeRate.push(tokens / (b.ms / 1000));
      }
      const c = median(cachedRate), f = median(recomputeRate);
      rows.push({
        arch,
        blockSize,
        params: model.numParams(),
        prompt,
        tokens,
        cachedTokensPerSec: c,
        recomputeTokensPerSec: f,
        speedup: c / f,
        sameTokens: same,
      });
    } finally {
      model.params.destroy();
    }
  }
  return rows;
}
