import { deepStrictEqual, equal, notEqual, ok, throws } from 'node:assert/strict';
import { gpuTest } from '../util/gpu.ts';
import { addUniformNoise, applyNeftune, noiseValue } from '../../src/kernels/noise.ts';
import { GPT } from '../../src/models/gpt.ts';
import { Trainer } from '../../src/train/trainer.ts';
import { parseConfig, type TrainConfig } from '../../src/train/config.ts';
import { CharTokenizer } from '../../src/data/tokenizer.ts';
import { TextDataset } from '../../src/data/dataset.ts';

const text = await Deno.readTextFile(new URL('../../public/data/tinyshakespeare.txt', import.meta.url));
const tok = CharTokenizer.fromText(text);
const ids = tok.encode(text);

gpuTest('uniform noise: matches its CPU twin, mean ≈ 0, |n| < scale, variance ≈ scale²/3, seeded', async (gpu) => {
  const n = 200_003; // ragged: not a multiple of the workgroup
  const base = Float32Array.from({ length: n }, (_, i) => Math.sin(i) * 3);
  const x = gpu.upload(base, [n]);
  const scale = 0.37;
  addUniformNoise(gpu, x, scale, 42);
  const got = await gpu.read(x) as Float32Array;
  let sum = 0;
  let sq = 0;
  let maxAbs = 0;
  for (let i = 0; i < n; i++) {
    const noise = got[i] - base[i];
    const want = Math.fround(base[i] + Math.fround(scale) * noiseValue(42, i));
    ok(Math.abs(got[i] - want) <= 1e-6 * (1 + Math.abs(want)), `element ${i}: ${got[i]} vs ${want}`);
    sum += noise;
    sq += noise * noise;
    maxAbs = Math.max(maxAbs, Math.abs(noiseValue(42, i) * scale));
  }
  const mean = sum / n;
  const variance = sq / n - mean * mean;
  ok(Math.abs(mean) < 4 * scale / Math.sqrt(3 * n), `mean ${mean}`);
  ok(maxAbs < scale && maxAbs > 0.99 * scale, `max |n| ${maxAbs} vs scale ${scale}`);
  ok(Math.abs(variance / (scale * scale / 3) - 1) < 0.02, `variance ${variance} vs ${scale * scale / 3}`);
  // Same seed → same noise; another seed → other noise.
  const y = gpu.upload(base, [n]);
  addUniformNoise(gpu, y, scale, 42);
  const again = await gpu.read(y) as Float32Array;
  ok(again.every((v, i) => v === got[i]), 'same seed, same noise');
  const z = gpu.upload(base, [n]);
  addUniformNoise(gpu, z, scale, 43);
  const other = await gpu.read(z) as Float32Array;
  let same = 0;
  for (let i = 0; i < n; i++) if (other[i] === got[i]) same++;
  ok(same < n / 100, `another seed differs (${same} equal)`);
  throws(() => addUniformNoise(gpu, x, -1, 0), /scale must be a finite number ≥ 0/);
  throws(() => applyNeftune(gpu, x, 2, 3, 4, { alpha: 5, seed: 0 }), /is not \(B=2, T=3, C=4\)/);
  for (const t of [x, y, z]) t.release();
});

gpuTest(
  'NEFTune: scale α/√(T·C) per global row; evaluation unaffected; training loss differs from α = 0; grad-accum adds the plain noise',
  async (gpu) => {
    const [b, t, c] = [2, 8, 16];
    const zeros = gpu.zeros([b, t, c], 'f32', 'x');
    applyNeftune(gpu, zeros, b, t, c, { alpha: 5, seed: 9 });
    const noise = await gpu.read(zeros) as Float32Array;
    const scale = 5 / Math.sqrt(t * c);
    ok(noise.every((v, i) => Math.abs(v - Math.fround(scale * noiseValue(9, i))) < 1e-7), 'x += α/√(T·C) · U(−1, 1)');
    zeros.release();
    // A micro-batch holding global row 1 draws that row's noise: the second row of the whole batch's.
    const second = gpu.zeros([1, t, c], 'f32', 'x1');
    applyNeftune(gpu, second, 1, t, c, { alpha: 5, seed: 9, row: 1 });
    deepStrictEqual(Array.from(await gpu.read(second) as Float32Array), Array.from(noise.subarray(t * c)));
    second.release();

    const base = {
      nLayer: 1,
      nHead: 2,
      nEmbd: 32,
      blockSize: 32,
      batchSize: 8,
      steps: 3,
      warmup: 0,
      lr: 1e-2,
      minLr: 1e-3,
      evalBatches: 2,
      logInterval: 3,
    };
    const data = new TextDataset(ids, 32);
    const mcfg = { vocabSize: tok.vocabSize, blockSize: 32, nLayer: 1, nHead: 2, nEmbd: 32, bias: true };
    const run = async (alpha: number, split: Partial<TrainConfig> = {}) => {
      const model = new GPT(gpu, mcfg, 1);
      const trainer = new Trainer(gpu, model, data, parseConfig({ ...base, neftuneAlpha: alpha, ...split }));
      const val0 = await trainer.evaluate('val');
      for (let s = 0; s < 3; s++) await trainer.step(s);
      const recs = await trainer.drain();
      const val1 = await trainer.evaluate('val');
      model.params.destroy();
      return { val0, losses: recs.map((r) => r.loss), val1 };
    };
    const plain = await run(0);
    const noisy = await run(15);
    const again = await run(15);
    equal(noisy.val0, plain.val0, 'evaluation adds no noise (same weights, same val loss)');
    notEqual(noisy.losses[0], plain.losses[0], 'the noisy training forward sees other embeddings');
    ok(
      Math.abs(noisy.losses[0] - plain.losses[0]) < 0.5,
      `…but the same batch: ${noisy.losses[0]} vs ${plain.losses[0]}`,
    );
    equal(noisy.losses.join(), again.losses.join(), 'NEFTune noise is reproducible from the seed');
    notEqual(noisy.val1, plain.val1, 'training with noise moves the weights differently');
    // The noise belongs to the global row, not the micro-batch: 2 micro-batches of 4 add the plain run's noise.
    const split = await run(15, { batchSize: 4, gradAccum: 2 });
    for (const [s, l] of split.losses.entries()) {
      const ref = noisy.losses[s], gap = Math.abs(noisy.losses[s] - plain.losses[s]);
      ok(Math.abs(l - ref) <= 1e-4 * ref, `step ${s}: grad-accum loss ${l} vs plain ${ref}`);
      ok(gap > 4 * 1e-4 * ref, `step ${s}: the noise moves the loss by ${gap}, far more than the tolerance`);
    }
    throws(() => parseConfig({ neftuneAlpha: -1 }), /neftuneAlpha/);
  },
);
