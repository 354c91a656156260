/**
 * Dynamic loss scaling (train/loss_scale.ts, docs/design.md#mixed-precision): the scaler's policy, and a
 * forced overflow through the trainer: with a loss scale that pushes the f16 copy of the loss
 * gradient past ±65 504, the update is skipped (parameters and AdamW state unchanged), the step
 * is recorded as skipped with a non-finite ‖g‖, and the scale halves.
 */
import { deepStrictEqual, equal, ok, throws } from 'node:assert/strict';
import { gpuTest, hasShaderF16 } from '../util/gpu.ts';
import { LossScaler, MIN_LOSS_SCALE } from '../../src/train/loss_scale.ts';
import { Trainer } from '../../src/train/trainer.ts';
import { parseConfig } from '../../src/train/config.ts';
import { createModel } from '../../src/models/registry.ts';
import { CharTokenizer } from '../../src/data/tokenizer.ts';
import { TextDataset } from '../../src/data/dataset.ts';

Deno.test('LossScaler: doubles after `window` clean steps, halves and skips on overflow, refuses to underflow', () => {
  const s = new LossScaler(8, 3);
  deepStrictEqual([s.update(true), s.update(true), s.scale], [true, true, 8]);
  equal(s.update(true), true);
  equal(s.scale, 16, 'the third clean step in a row doubles the scale');
  s.update(true);
  equal(s.update(false), false, 'an overflow skips the update');
  deepStrictEqual(s.state(), { scale: 8, clean: 0, skipped: 1 }, 'and halves the scale, restarting the count');
  const t = new LossScaler(1, 3);
  t.load(s.state());
  deepStrictEqual(t.state(), s.state(), 'a checkpoint state resumes as it was');
  throws(() => t.load({ scale: -1, clean: 0, skipped: 0 }), /scale/);
  const u = new LossScaler(MIN_LOSS_SCALE * 2, 1);
  u.update(false);
  throws(() => u.update(false), /loss scale fell below 2\^-24 after 2 skipped steps.*diverged/);
  throws(() => new LossScaler(0, 1), /loss scale must be positive and finite, got 0/);
  throws(() => new LossScaler(1, 0), /window must be an integer ≥ 1, got 0/);
});

const text = await Deno.readTextFile(new URL('../../public/data/tinyshakespeare.txt', import.meta.url));
const tok = CharTokenizer.fromText(text);

gpuTest('f16-mixed: a forced overflow skips the update and halves the loss scale; a sane scale trains', async (gpu) => {
  const base = { nLayer: 1, nHead: 2, nEmbd: 32, blockSize: 16, batchSize: 4, steps: 4, warmup: 0, logInterval: 4 };
  const data = new TextDataset(tok.encode(text.slice(0, 20_000)), 16);
  const make = (lossScale: number) => {
    const cfg = parseConfig({ ...base, precision: 'f16-mixed', lossScale });
    return new Trainer(gpu, createModel(gpu, cfg, tok.vocabSize), data, cfg);
  };
  if (!hasShaderF16(gpu)) {
    throws(() => make(1), /--precision f16-mixed: f16 tensors need the adapter's 'shader-f16' feature/);
    return;
  }
  // dy ≈ 1/(B·T) per element: times 2^100 it is finite in f32 but far past f16's 65 504.
  const over = make(2 ** 100);
  const before = await gpu.read(over.model.params.values);
  await over.step(0);
  await over.step(1);
  const recs = await over.drain();
  deepStrictEqual(recs.map((r) => [r.lossScale, r.skipped]), [[2 ** 100, true], [2 ** 99, true]]);
  ok(recs.every((r) => !Number.isFinite(r.gradNorm) && Number.isFinite(r.loss)), JSON.stringify(recs));
  equal(over.scaler!.scale, 2 ** 98);
  deepStrictEqual(await gpu.read(over.model.params.values), before, 'skipped updates leave the weights as they were');
  ok((await gpu.read(over.model.params.m)).every((v) => v === 0), 'and the AdamW moments untouched');

  const sane = make(2 ** 10);
  const start = await gpu.read(sane.model.params.values);
  for (let s = 0; s < 4; s++) await sane.step(s);
  const ok4 = await sane.drain();
  ok(ok4.every((r) => !r.skipped && Number.isFinite(r.gradNorm) && r.lossScale === 2 ** 10), JSON.stringify(ok4));
  const after = await gpu.read(sane.model.params.values);
  ok(after.some((v, i) => v !== start[i]), 'the updates applied');
  // ‖g‖ is reported unscaled: the same step in f32 gives nearly the same norm.
  const cfg32 = parseConfig({ ...base });
  const f32 = new Trainer(gpu, createModel(gpu, cfg32, tok.vocabSize), data, cfg32);
  await f32.step(0);
  const [r32] = await f32.drain();
  ok(Math.abs(ok4[0].gradNorm - r32.gradNorm) < 0.02 * r32.gradNorm, `‖g‖ ${ok4[0].gradNorm} vs f32 ${r32.gradNorm}`);
});
