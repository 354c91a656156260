import { deepStrictEqual, equal, ok, throws } from 'node:assert/strict';
import { gpuTest } from '../util/gpu.ts';
import { goldfishMask } from '../../src/train/goldfish.ts';
import { GPT } from '../../src/models/gpt.ts';
import { Trainer } from '../../src/train/trainer.ts';
import { parseConfig } from '../../src/train/config.ts';
import { CharTokenizer } from '../../src/data/tokenizer.ts';
import { TextDataset } from '../../src/data/dataset.ts';

const text = await Deno.readTextFile(new URL('../../public/data/tinyshakespeare.txt', import.meta.url));
const tok = CharTokenizer.fromText(text);
const ids = tok.encode(text);

Deno.test('goldfish drops ≈ 1/k of the targets that have h tokens of context, on Shakespeare', () => {
  const data = new TextDataset(ids, 256);
  const { x, y } = data.batch('train', 64, 256, 7, 0);
  for (const k of [2, 4, 8]) {
    const m = goldfishMask(y, x, 256, k, 13);
    let dropped = 0;
    let eligible = 0;
    for (let i = 0; i < m.length; i++) {
      if (i % 256 < 12) {
        equal(m[i], y[i], 'the first h−1 targets of a row are kept');
        continue;
      }
      eligible++;
      if (m[i] === -1) dropped++;
      else equal(m[i], y[i], 'kept targets are unchanged');
    }
    const rate = dropped / eligible;
    ok(Math.abs(rate - 1 / k) < 0.025, `k=${k}: drop rate ${rate.toFixed(4)} ≈ ${1 / k}`);
  }
});

Deno.test('goldfish: the same passage drops the same tokens wherever it sits in a batch', () => {
  const t = 128;
  const passage = ids.subarray(5000, 5000 + t + 1);
  const shift = 17;
  const x = new Int32Array(2 * t);
  const y = new Int32Array(2 * t);
  x.set(passage.subarray(0, t), 0);
  y.set(passage.subarray(1, t + 1), 0);
  // Row 1: unrelated text, then the passage starting 17 tokens in.
  x.set(ids.subarray(90000, 90000 + shift), t);
  y.set(ids.subarray(90001, 90001 + shift), t);
  x.set(passage.subarray(0, t - shift), t + shift);
  y.set(passage.subarray(1, t - shift + 1), t + shift);
  const m = goldfishMask(y, x, t, 3, 13);
  let drops = 0;
  for (let j = 12; j < t - shift; j++) {
    equal(m[t + shift + j], m[j], `passage token ${j}`);
    if (m[j] === -1) drops++;
  }
  ok(drops > 10, `the passage had drops to compare (${drops})`);
});

Deno.test('goldfish k = 0 leaves the targets as they are; bad k and shapes are refused', () => {
  const y = Int32Array.from([1, 2, 3, 4]);
  equal(goldfishMask(y, Int32Array.from([0, 1, 2, 3]), 4, 0, 13), y);
  deepStrictEqual(y, Int32Array.from([1, 2, 3, 4]));
  throws(() => goldfishMask(y, y, 4, 1, 13), /k must be 0 \(off\) or an integer ≥ 2/);
  throws(() => goldfishMask(y, y, 3, 2, 1), /whole rows of 3/);
});

gpuTest('goldfish: evaluation scores every token, and a short run still trains', async (gpu) => {
  const base = {
    nLayer: 1,
    nHead: 2,
    nEmbd: 32,
    blockSize: 32,
    batchSize: 8,
    steps: 40,
    warmup: 5,
    lr: 1e-2,
    minLr: 1e-3,
    evalBatches: 2,
    logInterval: 40,
  };
  const cfg = parseConfig({ ...base, goldfishK: 2, goldfishH: 4 });
  const data = new TextDataset(ids, cfg.blockSize);
  const model = new GPT(gpu, {
    vocabSize: tok.vocabSize,
    blockSize: cfg.blockSize,
    nLayer: 1,
    nHead: 2,
    nEmbd: 32,
    bias: true,
  }, 1);
  const plain = new Trainer(gpu, model, data, parseConfig(base));
  const trainer = new Trainer(gpu, model, data, cfg);
  const init = await trainer.evaluate('val');
  equal(init, await plain.evaluate('val'), 'evaluation ignores goldfish');
  // The same initial weights and batch: the masked step averages over fewer tokens, so its loss differs.
  const twin = new GPT(gpu, {
    vocabSize: tok.vocabSize,
    blockSize: cfg.blockSize,
    nLayer: 1,
    nHead: 2,
    nEmbd: 32,
    bias: true,
  }, 1);
  const unmaskedTrainer = new Trainer(gpu, twin, data, parseConfig(base));
  await unmaskedTrainer.step(0);
  const [unmasked] = await unmaskedTrainer.drain();
  twin.params.destroy();
  for (let s = 0; s < cfg.steps; s++) await trainer.step(s);
  const recs = await trainer.drain();
  ok(
    recs[0].loss !== unmasked.loss && Math.abs(recs[0].loss - unmasked.loss) < 0.3,
    `step 0 loss: masked ${recs[0].loss} vs all tokens ${unmasked.loss}`,
  );
  const first = recs.slice(0, 5).reduce((a, r) => a + r.loss, 0) / 5;
  const last = recs.slice(-5).reduce((a, r) => a + r.loss, 0) / 5;
  ok(last < first - 0.5, `training loss falls: ${first.toFixed(3)} → ${last.toFixed(3)}`);
  const after = await trainer.evaluate('val');
  ok(after < init - 0.5, `val loss (every token) falls: ${init.toFixed(3)} → ${after.toFixed(3)}`);
  model.params.destroy();
});
