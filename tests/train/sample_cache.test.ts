/**
 * `sample` with the KV cache (src/train/sample.ts sampleCached, docs/design.md#decoding-with-a-kv-cache) draws the
 * same tokens as the full-recompute path for the same seed: greedy (top-1) and sampled
 * (temperature 1, no top-k), with the prompt plus the generated tokens running past the block
 * size so the sliding window (one prefill per token) is reached too. gpt-moe (top-1, 4 experts)
 * gets capacity factor 4 = E/k, so the recompute pass over 16 tokens drops none: the cached path
 * routes one token at a time and never drops (docs/design.md#decoding-with-a-kv-cache). Mamba, the hybrid and the
 * linear attention (both decays) carry their layers' state (docs/design.md#decoding-state-of-the-recurrent-layers),
 * recurrent depth caches every iteration; an architecture with no decoding form falls back to the recompute path.
 */
import { deepEqual, equal, ok } from 'node:assert/strict';
import { gpuTest } from '../util/gpu.ts';
import { rng } from '../util/assert.ts';
import { createModel } from '../../src/models/registry.ts';
import type { LanguageModel } from '../../src/models/model.ts';
import { parseConfig, type TrainConfig } from '../../src/train/config.ts';
import { sampleCached, sampleRecompute, sampleTokens } from '../../src/train/sample.ts';
import { Random } from '../../src/util/random.ts';
import type { Gpu } from '../../src/gpu/context.ts';

const V = 29;

async function model(gpu: Gpu, extra: Partial<TrainConfig>): Promise<LanguageModel> {
  const m = createModel(gpu, parseConfig({ nLayer: 2, nHead: 2, nEmbd: 32, blockSize: 16, ...extra }), V, 5);
  // Off the small initial weights, so the logits are far from uniform and the tokens vary.
  const r = rng(9), w = Float32Array.from(await gpu.read(m.params.values));
  for (let i = 0; i < w.length; i++) w[i] += 0.4 * (r() - 0.5);
  gpu.write(m.params.values, w);
  return m;
}

const PROMPT = Int32Array.from([3, 1, 4, 1, 5]);

const ARCHS: [string, Partial<TrainConfig>][] = [
  ['gpt', { arch: 'gpt' }],
  ['gpt-moe', { arch: 'gpt-moe', capacityFactor: 4 }],
  ['mamba', { arch: 'mamba' }],
  ['hybrid', { arch: 'hybrid', attnEvery: 1 }],
  ['recurrent-depth', { arch: 'recurrent-depth', nLayer: 3, preludeLayers: 1, codaLayers: 1, evalIterations: 2 }],
  ['linear, head decay', { arch: 'linear', linearDecay: 'head' }],
  ['linear, channel decay', { arch: 'linear', linearDecay: 'channel' }],
];

for (const [label, extra] of ARCHS) {
  gpuTest(`sample: the KV-cache path draws the recompute path's tokens (${label})`, async (gpu) => {
    const m = await model(gpu, extra);
    for (const [temperature, topK] of [[1, 1], [1, 0], [0.8, 5]]) {
      const o = { temperature, topK, autocast: null };
      // 5 + 20 tokens: 11 single-token steps, then the window slides past blockSize 16.
      const cached = await sampleCached(m, PROMPT, 20, new Random(42), o);
      const full = await sampleRecompute(gpu, m, PROMPT, 20, new Random(42), o);
      deepEqual([...cached], [...full], `temperature ${temperature}, top-k ${topK}`);
      equal(cached.length, 20);
      if (topK !== 1) ok(new Set(cached).size >= 3, `sampled tokens vary: ${cached}`);
    }
    m.params.destroy();
  });
}

gpuTest('sample: an architecture without a decoding form samples through the recompute path', async (gpu) => {
  const m = await model(gpu, { arch: 'linear' });
  // The linear model under an arch name the decoder does not know: no cached path for it.
  const other = Object.create(m, { arch: { value: 'rnn' } }) as LanguageModel;
  await sampleCached(other, PROMPT, 1, new Random(1), { temperature: 1, topK: 0, autocast: null }).then(
    () => ok(false, 'the KV-cache path ran an architecture it does not support'),
    (e: Error) => ok(e.message.includes("arch 'rnn' is not supported"), e.message),
  );
  const o = { temperature: 1, topK: 0, autocast: null };
  const got = await sampleTokens(gpu, other, PROMPT, 6, new Random(1), o);
  deepEqual([...got], [...await sampleRecompute(gpu, m, PROMPT, 6, new Random(1), o)]);
  m.params.destroy();
});
