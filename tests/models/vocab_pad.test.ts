/**
 * `--pad-vocab N` (src/models/vocab_pad.ts): the padded sizes, the cross-entropy kernel's `cols`
 * (padded columns out of the softmax and the gradient, whatever their logits), a padded model
 * whose real logits, loss and gradients equal the unpadded model's (padded rows zero, undrawn),
 * and sampling that never produces a padded id.
 */
import { equal, ok, throws } from 'node:assert/strict';
import { gpuTest } from '../util/gpu.ts';
import { assertClose, rng } from '../util/assert.ts';
import { Tape } from '../../src/autograd/tape.ts';
import { RULES } from '../../src/autograd/rules.ts';
import { createModel } from '../../src/models/registry.ts';
import type { LanguageModel } from '../../src/models/model.ts';
import { headTuning } from '../../src/models/head.ts';
import { paddedVocabSize, vocabShape } from '../../src/models/vocab_pad.ts';
import { crossEntropyBackward, crossEntropyForward } from '../../src/kernels/cross_entropy.ts';
import { crossEntropyRef } from '../../src/reference/cross_entropy.ts';
import { parseConfig, type TrainConfig } from '../../src/train/config.ts';
import { Trainer } from '../../src/train/trainer.ts';
import { TextDataset } from '../../src/data/dataset.ts';
import { Random } from '../../src/util/random.ts';
import type { Gpu } from '../../src/gpu/context.ts';

Deno.test('paddedVocabSize: multiples of N (N·tp under tp), 1 = unpadded, bad values refused', () => {
  equal(paddedVocabSize(50257, 64), 50304); // nanoGPT's GPT-2 padding
  equal(paddedVocabSize(65, 64), 128);
  equal(paddedVocabSize(128, 64), 128);
  equal(paddedVocabSize(65, 1), 65);
  equal(paddedVocabSize(65, 1, 2), 65, 'N = 1: the tp layer pads on its own');
  equal(paddedVocabSize(129, 64, 2), 256);
  equal(paddedVocabSize(51, 64, 2), 128);
  throws(() => paddedVocabSize(65, 0), /--pad-vocab must be a positive integer, got 0/);
  throws(() => paddedVocabSize(65, 1.5), /--pad-vocab must be a positive integer/);
  equal(JSON.stringify(vocabShape({ padVocab: 64 }, 65)), '{"vocabSize":128,"realVocab":65}');
  equal(JSON.stringify(vocabShape({ padVocab: 1 }, 65)), '{"vocabSize":65}');
});

Deno.test('--pad-vocab config: 0, negative and non-integer values are errors naming padVocab', () => {
  equal(parseConfig({ padVocab: 64 }).padVocab, 64);
  equal(parseConfig({}).padVocab, 1);
  for (const bad of [0, -64, 2.5]) throws(() => parseConfig({ padVocab: bad }), /padVocab: /);
});

gpuTest('crossEntropy cols: padded columns leave the softmax and get no gradient, however large', async (gpu) => {
  const n = 6, v = 16, cols = 11, r = rng(3);
  const logits = Float32Array.from({ length: n * v }, (_, i) => (i % v) >= cols ? 30 : 2 * r() - 1);
  const targets = Int32Array.from({ length: n }, (_, i) => (i === 2 ? -1 : Math.floor(r() * cols)));
  const real = new Float64Array(n * cols);
  for (let i = 0; i < n; i++) for (let j = 0; j < cols; j++) real[i * cols + j] = logits[i * v + j];
  const ref = crossEntropyRef(real, targets, n, cols);
  const tL = gpu.upload(logits, [n, v]), tT = gpu.upload(targets, [n], 'i32');
  const lse = gpu.zeros([n]), loss = gpu.zeros([2]), d = gpu.zeros([n, v]);
  crossEntropyForward(gpu, tL, tT, lse, loss, cols);
  crossEntropyBackward(gpu, tL, tT, lse, loss, d, 1, cols);
  const got = await gpu.read(loss) as Float32Array, dz = await gpu.read(d) as Float32Array;
  assertClose([got[0]], [ref.loss], 'loss over the real columns');
  equal(got[1], ref.count);
  for (let i = 0; i < n * v; i++) if (i % v >= cols) equal(dz[i], 0, `dlogits[${i}] of a padded column`);
  ok(dz.some((x) => x !== 0), 'real columns get a gradient');
  throws(() => crossEntropyForward(gpu, tL, tT, lse, loss, v + 1), /cols must be an integer in \[1, V=16\]/);
  [tL, tT, lse, loss, d].forEach((t) => t.release());
});

/** One forward + backward: loss, logits (N, V') and the gradients by name. */
async function pass(gpu: Gpu, model: LanguageModel, tokens: Int32Array, targets: Int32Array, b: number, t: number) {
  const tTok = gpu.upload(tokens, [b, t], 'i32'), tTgt = gpu.upload(targets, [b, t], 'i32');
  model.params.zeroGrad();
  const tape = new Tape(gpu, model.params.gradMap());
  const { logits, loss } = await model.forward(tape, tTok, tokens, tTgt, b, t);
  tape.backward(RULES);
  const grads = await gpu.read(model.params.grads) as Float32Array;
  const out = {
    loss: (await gpu.read(loss!) as Float32Array)[0],
    logits: logits ? await gpu.read(logits) as Float32Array : null,
    grad: (name: string) => {
      const p = model.params.get(name);
      return grads.subarray(p.offset, p.offset + p.size);
    },
  };
  tape.dispose();
  tTok.release();
  tTgt.release();
  return out;
}

const V = 53, B = 4, T = 32; // N = 128 rows: two chunks of the 64-row granule below
const EMBEDDING: Record<string, string> = { gpt: 'transformer.wte.weight', mamba: 'backbone.embedding.weight' };
for (const arch of ['gpt', 'mamba'] as const) {
  gpuTest(`${arch} --pad-vocab 64: real logits, loss and gradients equal the unpadded model's`, async (gpu) => {
    const base: Partial<TrainConfig> = { arch, nLayer: 1, nHead: 2, nEmbd: 16, blockSize: T, batchSize: B };
    const plain = createModel(gpu, parseConfig(base), V, 5);
    const padded = createModel(gpu, parseConfig({ ...base, padVocab: 64 }), V, 5);
    equal(padded.cfg.vocabSize, 64);
    const r = rng(9), C = 16, emb = EMBEDDING[arch];
    const tokens = Int32Array.from({ length: B * T }, () => Math.floor(r() * V));
    const targets = Int32Array.from({ length: B * T }, () => Math.floor(r() * V));
    const a = await pass(gpu, plain, tokens, targets, B, T), p = await pass(gpu, padded, tokens, targets, B, T);
    assertClose([p.loss], [a.loss], 'loss');
    for (let i = 0; i < B * T; i++) {
      assertClose(p.logits!.subarray(i * 64, i * 64 + V), a.logits!.subarray(i * V, (i + 1) * V), `logits row ${i}`);
    }
    for (const q of plain.params.params) {
      const g = p.grad(q.name);
      if (q.name !== emb) assertClose(g, a.grad(q.name), `grad ${q.name}`);
      else {
        assertClose(g.subarray(0, V * C), a.grad(q.name), `grad ${q.name} (real rows)`);
        ok(g.subarray(V * C).every((x) => x === 0), 'padded rows get no gradient');
      }
    }
    // The chunked head (models/head.ts) masks the same columns.
    headTuning.maxRows = 64;
    try {
      const c = await pass(gpu, padded, tokens, targets, B, T);
      equal(c.logits, null, 'chunked');
      assertClose([c.loss], [a.loss], 'chunked loss');
    } finally {
      headTuning.maxRows = 0;
    }
    plain.params.destroy();
    padded.params.destroy();
  });
}

gpuTest('--pad-vocab: sampling draws only real ids, even from a flat distribution', async (gpu) => {
  const cfg = parseConfig({ nLayer: 1, nHead: 2, nEmbd: 16, blockSize: 16, batchSize: 2, padVocab: 64 });
  const model = createModel(gpu, cfg, V, 3);
  const data = new TextDataset(Int32Array.from({ length: 400 }, (_, i) => i % V), 16);
  const trainer = new Trainer(gpu, model, data, cfg);
  // Temperature 1e4 makes softmax nearly uniform over whatever columns the sampler sees: with
  // the 11 padded ones among them, 60 draws would hit one with probability 1 − (53/64)^60 > 0.9999.
  const ids = await trainer.sample(Int32Array.of(1, 2), 60, new Random(1), 1e4, 0);
  ok(ids.every((id) => id >= 0 && id < V), `sampled ${[...ids].filter((id) => id >= V)} ≥ V = ${V}`);
  model.params.destroy();
});
