import { deepStrictEqual, equal, ok, throws } from 'node:assert/strict';
import { gpuTest } from '../util/gpu.ts';
import { greedyGenerate, measureMemorization, scoreContinuations } from '../../src/train/memorization.ts';
import { GPT } from '../../src/models/gpt.ts';
import { Trainer } from '../../src/train/trainer.ts';
import { parseConfig } from '../../src/train/config.ts';
import { TextDataset } from '../../src/data/dataset.ts';
import { Random } from '../../src/util/random.ts';
import { runCli } from '../util/cli.ts';

Deno.test('memorization score: exact-match rate and mean per-token match on constructed rows', () => {
  const truth = Int32Array.from([1, 2, 3, 4, /**/ 5, 6, 7, 8, /**/ 9, 9, 9, 9]);
  const gen = Int32Array.from([1, 2, 3, 4, /**/ 5, 0, 7, 0, /**/ 0, 0, 0, 0]);
  deepStrictEqual(scoreContinuations(gen, truth, 4), { n: 3, exactMatch: 1 / 3, score: 6 / 12 });
  deepStrictEqual(scoreContinuations(truth, truth, 4), { n: 3, exactMatch: 1, score: 1 });
  throws(() => scoreContinuations(gen, truth, 5), /whole rows of 5/);
});

// A corpus whose training part is one 50-token random passage repeated 24 times (memorizable:
// 8 tokens of context determine the next), and whose held-out tail is fresh random tokens.
const V = 24;
const rng = new Random(3);
const passage = Array.from({ length: 50 }, () => rng.int(V));
const heldOut = Array.from({ length: 200 }, () => rng.int(V));
const tokens = Int32Array.from([...Array.from({ length: 24 }, () => passage).flat(), ...heldOut]);
const data = new TextDataset(tokens, 16, heldOut.length / tokens.length);

gpuTest(
  'greedy decoding: batched equals one prompt at a time; a memorized corpus scores high on train only',
  async (gpu) => {
    const mcfg = { vocabSize: V, blockSize: 16, nLayer: 1, nHead: 2, nEmbd: 48, bias: true };
    const model = new GPT(gpu, mcfg, 2);
    const cfg = parseConfig({
      nLayer: 1,
      nHead: 2,
      nEmbd: 48,
      blockSize: 16,
      batchSize: 16,
      steps: 150,
      warmup: 10,
      lr: 1e-2,
      minLr: 1e-3,
      logInterval: 150,
    });
    // Untrained: batched decoding (one forward for 6 prompts) must equal per-prompt decoding.
    const prompts = data.batch('train', 6, 8, 1, 0).x;
    const batched = await greedyGenerate(gpu, model, prompts, 8, 10, 6);
    const single: number[] = [];
    for (let r = 0; r < 6; r++) {
      single.push(
        ...await greedyGenerate(gpu, model, prompts.subarray(r * 8, r * 8 + 8), 8, 10, 1),
      );
    }
    deepStrictEqual(Array.from(batched), single);
    const before = await measureMemorization(gpu, model, data, { samples: 16, seed: 0, promptLen: 8, continuation: 8 });
    const trainer = new Trainer(gpu, model, data, cfg);
    for (let s = 0; s < cfg.steps; s++) await trainer.step(s);
    await trainer.drain();
    const after = await measureMemorization(gpu, model, data, { samples: 16, seed: 0, promptLen: 8, continuation: 8 });
    ok(before.train.exactMatch < 0.2, `untrained exact match ${before.train.exactMatch}`);
    ok(after.train.exactMatch > 0.8 && after.train.score > 0.9, `memorized: ${JSON.stringify(after.train)}`);
    ok(after.val.score < 0.3 && after.val.exactMatch === 0, `held-out is not: ${JSON.stringify(after.val)}`);
    equal(after.train.n, 16);
    model.params.destroy();
  },
);

Deno.test({
  name: 'memorization CLI: scores a checkpoint; missing flags are one-line errors',
  sanitizeResources: false,
  fn: async () => {
    const dir = await Deno.makeTempDir();
    const corpus = `${dir}/c.txt`;
    const text = await Deno.readTextFile(new URL('../../public/data/tinyshakespeare.txt', import.meta.url));
    await Deno.writeTextFile(corpus, text.slice(0, 5000));
    const tr = await runCli('train.ts', [
      '--data',
      corpus,
      '--n-layer',
      '1',
      '--n-embd',
      '16',
      '--n-head',
      '2',
      '--block-size',
      '16',
      '--batch-size',
      '4',
      '--steps',
      '2',
      '--warmup',
      '0',
      '--eval-batches',
      '1',
      '--sample-tokens',
      '0',
      '--out',
      `${dir}/run`,
    ]);
    equal(tr.code, 0, tr.stderr);
    const r = await runCli('memorization.ts', [
      '--checkpoint',
      `${dir}/run/ckpt.safetensors`,
      '--samples',
      '4',
      '--prompt',
      '8',
      '--continuation',
      '8',
      '--json',
      `${dir}/m.json`,
    ]);
    equal(r.code, 0, r.stderr);
    ok(/train\s+4\s+[\d.]+%\s+[\d.]+/.test(r.stdout) && /val\s+4/.test(r.stdout), r.stdout);
    const j = JSON.parse(await Deno.readTextFile(`${dir}/m.json`));
    ok(j.train.n === 4 && j.val.score >= 0 && j.val.score <= 1, JSON.stringify(j));
    const none = await runCli('memorization.ts', []);
    equal(none.code, 1);
    ok(/error: --checkpoint FILE is required/.test(none.stderr), none.stderr);
    const bad = await runCli('memorization.ts', ['--checkpoint', 'x', '--samples', '0']);
    ok(/--samples expects an integer ≥ 1, got '0'/.test(bad.stderr), bad.stderr);
  },
});
