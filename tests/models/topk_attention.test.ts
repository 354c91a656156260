/**
 * `--topk-attention` in evaluation (models/context.ts, train/evaluate.ts): with k ≥ T the
 * validation loss is the materialised kernel's exactly, for every architecture with attention;
 * a small k changes it; training steps ignore it; an architecture without attention and a
 * parallel plan refuse it.
 */
import { equal, notEqual, ok, throws } from 'node:assert/strict';
import { gpuTest } from '../util/gpu.ts';
import { parseConfig } from '../../src/train/config.ts';
import { createModel } from '../../src/models/registry.ts';
import { meanLoss } from '../../src/train/evaluate.ts';
import { TextDataset } from '../../src/data/dataset.ts';
import { ATTENTION_ARCHS } from '../../src/models/archs.ts';
import { checkMeshPlan } from '../../src/parallel/plan/mesh_plan.ts';
import { sampleTokens } from '../../src/train/sample.ts';
import { Random } from '../../src/util/random.ts';
import { makePlan } from '../../src/parallel/plan/plan.ts';

const V = 23;
const data = new TextDataset(Int32Array.from({ length: 4000 }, (_, i) => (i * 7 + (i >> 3)) % V), 16);

for (const arch of ATTENTION_ARCHS) {
  gpuTest(
    `topk attention in evaluation (${arch}): k = T is the materialised kernel's loss exactly, k = 1 is not`,
    async (gpu) => {
      // recurrent-depth: the core alone (no prelude, no coda), so every attention runs on the
      // iterations' own tapes, which must carry the option too.
      const rd = arch === 'recurrent-depth' ? { preludeLayers: 0, codaLayers: 0 } : {};
      const base = {
        arch,
        nLayer: 2,
        nHead: 2,
        nEmbd: 16,
        blockSize: 16,
        batchSize: 2,
        evalBatches: 2,
        nExpert: 2,
        ...rd,
      };
      const cfg = parseConfig({ ...base, attention: 'naive' });
      const model = createModel(gpu, cfg, V);
      try {
        const naive = await meanLoss(gpu, model, data, cfg);
        equal(await meanLoss(gpu, model, data, { ...cfg, topkAttention: 16 }), naive);
        equal(await meanLoss(gpu, model, data, { ...cfg, topkAttention: 99 }), naive);
        const one = await meanLoss(gpu, model, data, { ...cfg, topkAttention: 1 });
        ok(Number.isFinite(one));
        notEqual(one, naive);
      } finally {
        model.params.destroy();
      }
    },
  );
}

gpuTest('sampling with top-k attention: k ≥ T draws the same tokens as the KV-cache path, k = 1 runs', async (gpu) => {
  const cfg = parseConfig({ nLayer: 2, nHead: 2, nEmbd: 16, blockSize: 16, attention: 'naive' });
  const model = createModel(gpu, cfg, V);
  try {
    const draw = (topkAttention: number | null) =>
      sampleTokens(gpu, model, Int32Array.of(1, 2, 3), 20, new Random(5), {
        temperature: 1,
        topK: 0,
        autocast: null,
        topkAttention,
      });
    const cached = await draw(null);
    equal((await draw(16)).join(), cached.join());
    equal((await draw(1)).length, 20);
  } finally {
    model.params.destroy();
  }
});

Deno.test('topk attention is refused where there is no attention, and by parallel plans', () => {
  throws(
    () => parseConfig({ arch: 'mamba', topkAttention: 4 }),
    /topkAttention selects attention scores and --arch mamba has no attention; use gpt, gpt-moe, hybrid, recurrent-depth/,
  );
  const cfg = parseConfig({ topkAttention: 4, nLayer: 2, nHead: 2, nEmbd: 16, blockSize: 16 });
  throws(
    () => checkMeshPlan(makePlan({ dp: 2 }), cfg, V, 2),
    /--topk-attention 4 \(evaluation of single-rank runs only\)/,
  );
});
