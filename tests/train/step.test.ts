import { equal, ok } from 'node:assert/strict';
import { gpuTest } from '../util/gpu.ts';
import { GPT } from '../../src/models/gpt.ts';
import { Trainer } from '../../src/train/trainer.ts';
import { parseConfig } from '../../src/train/config.ts';
import { CharTokenizer } from '../../src/data/tokenizer.ts';
import { TextDataset } from '../../src/data/dataset.ts';

const text = await Deno.readTextFile(new URL('../../public/data/tinyshakespeare.txt', import.meta.url));
const tok = CharTokenizer.fromText(text);

gpuTest('a training step allocates no GPU buffer after the first; loss starts at ln(V) and falls', async (gpu) => {
  const cfg = parseConfig({
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
  });
  const data = new TextDataset(tok.encode(text), cfg.blockSize);
  const model = new GPT(gpu, {
    vocabSize: tok.vocabSize,
    blockSize: cfg.blockSize,
    nLayer: 1,
    nHead: 2,
    nEmbd: 32,
    bias: true,
  }, 1);
  const trainer = new Trainer(gpu, model, data, cfg);
  const init = await trainer.evaluate('val');
  ok(
    Math.abs(init - Math.log(tok.vocabSize)) < 0.15,
    `initial val loss ${init} ≈ ln(${tok.vocabSize}) = ${Math.log(tok.vocabSize)}`,
  );
  await trainer.step(0);
  await trainer.drain();
  const created = gpu.pool.stats.createdCount;
  const bytes = gpu.pool.stats.createdBytes;
  for (let s = 1; s < cfg.steps; s++) await trainer.step(s);
  const recs = await trainer.drain();
  equal(gpu.pool.stats.createdCount, created, 'no new buffers after step 0');
  equal(gpu.pool.stats.createdBytes, bytes);
  equal(recs.length, cfg.steps - 1);
  const first = recs.slice(0, 5).reduce((a, r) => a + r.loss, 0) / 5;
  const last = recs.slice(-5).reduce((a, r) => a + r.loss, 0) / 5;
  ok(last < first - 0.5, `loss falls: ${first.toFixed(3)} → ${last.toFixed(3)}`);
  ok(recs.every((r) => Number.isFinite(r.gradNorm) && r.gradNorm > 0), 'grad norms recorded');
  model.params.destroy();
});

gpuTest('Trainer.release hands back every buffer the trainer allocated, after steps and an evaluation', async (gpu) => {
  const cfg = parseConfig({ nLayer: 1, nHead: 2, nEmbd: 32, blockSize: 16, batchSize: 4, steps: 3, logInterval: 1 });
  const data = new TextDataset(tok.encode(text.slice(0, 20000)), cfg.blockSize);
  const model = new GPT(
    gpu,
    { vocabSize: tok.vocabSize, blockSize: 16, nLayer: 1, nHead: 2, nEmbd: 32, bias: true },
    1,
  );
  const live = gpu.pool.stats.liveBytes;
  const trainer = new Trainer(gpu, model, data, cfg);
  // logInterval 1 with 3 pending steps grows the loss history once: the grown buffer is released too.
  for (let s = 0; s < cfg.steps; s++) await trainer.step(s);
  await trainer.drain();
  await trainer.evaluate('val');
  ok(gpu.pool.stats.liveBytes > live, 'the trainer holds buffers');
  trainer.release();
  equal(gpu.pool.stats.liveBytes, live, 'all of them back after release');
  model.params.destroy();
});
