import { deepStrictEqual, equal, match, ok, throws } from 'node:assert/strict';
import { formatDataSpec, MixtureDataset, parseDataSpec } from '../../src/data/mixture.ts';
import { TextDataset } from '../../src/data/dataset.ts';
import { loadTrainingData } from '../../src/io/corpus.ts';
import { parseConfig } from '../../src/train/config.ts';
import { Trainer } from '../../src/train/trainer.ts';
import { GPT } from '../../src/models/gpt.ts';
import { gpuTest } from '../util/gpu.ts';
import { runCli } from '../util/cli.ts';

const shakespeare = await Deno.readTextFile(new URL('../../public/data/tinyshakespeare.txt', import.meta.url));
const tolstoy = (await Deno.readTextFile(new URL('../../public/data/warandpeace.txt', import.meta.url))).replace(
  /^\uFEFF/,
  '',
);
const dir = await Deno.makeTempDir();
const A = `${dir}/a.txt`;
const B = `${dir}/b.txt`;
await Deno.writeTextFile(A, shakespeare.slice(0, 20_000));
await Deno.writeTextFile(B, tolstoy.slice(50_000, 70_000));

Deno.test('data spec: one file, weighted files, and every malformed form is a clear error', () => {
  deepStrictEqual(parseDataSpec('a.txt'), [{ path: 'a.txt', weight: 1 }]);
  deepStrictEqual(parseDataSpec('a.txt:0.95,b.txt:0.05'), [{ path: 'a.txt', weight: 0.95 }, {
    path: 'b.txt',
    weight: 0.05,
  }]);
  deepStrictEqual(parseDataSpec('x:y/a.txt:1'), [{ path: 'x:y/a.txt', weight: 1 }]);
  equal(formatDataSpec(parseDataSpec('a.txt:0.7,b.txt:0.3')), 'a.txt:0.7,b.txt:0.3');
  throws(() => parseDataSpec('a.txt:0.5,b.txt:0.6'), /weights sum to 1\.1, not 1/);
  throws(() => parseDataSpec('a.txt:1,b.txt:0'), /weight 0 of 'b\.txt' must be positive/);
  throws(() => parseDataSpec('a.txt:1.2,b.txt:-0.2'), /weight -0\.2 of 'b\.txt' must be positive/);
  throws(() => parseDataSpec('a.txt:0.5,b.txt'), /'b\.txt' has no weight/);
  throws(() => parseDataSpec('a.txt:half'), /weight 'half' of 'a\.txt' is not a number/);
  throws(() => parseDataSpec('a.txt:0.5,,b.txt:0.5'), /empty entry/);
  throws(() => parseDataSpec('a.txt:0.5,a.txt:0.5'), /listed twice/);
  throws(() => parseConfig({ data: 'a.txt:0.9,b.txt:0.2' }), /Invalid config: data: .*weights sum to/);
});

Deno.test('mixture: one file draws exactly the single-file batches; weights are respected', async () => {
  const { tokenizer, data } = await loadTrainingData({
    data: `${A}:0.8,${B}:0.2`,
    tokenizer: 'char',
    blockSize: 16,
    valFraction: 0.1,
  });
  // The char vocabulary is the union of both files' characters.
  equal(tokenizer.vocabSize, new Set(Array.from(shakespeare.slice(0, 20_000) + tolstoy.slice(50_000, 70_000))).size);
  const single = new TextDataset(tokenizer.encode(shakespeare.slice(0, 20_000)), 16);
  const one = new MixtureDataset([single], [1], ['a']);
  for (const step of [0, 7, 99]) {
    deepStrictEqual(one.batch('train', 4, 16, 3, step, 1).x, single.batch('train', 4, 16, 3, step, 1).x);
  }
  let fromB = 0;
  let rows = 0;
  for (let step = 0; step < 400; step++) {
    const batch = data.batch('train', 8, 16, 11, step);
    for (let r = 0; r < 8; r++) {
      rows++;
      if (batch.source[r] === 1) fromB++;
      // Each row is a real window of the corpus it names.
      const src = data.sources[batch.source[r]].train;
      const row = Array.from(batch.x.subarray(r * 16, r * 16 + 16));
      if (r === 0 && step < 20) {
        ok(indexOfRow(src, row) >= 0, `row ${r} of step ${step} is in source ${batch.source[r]}`);
      }
    }
  }
  const share = fromB / rows;
  const sd = Math.sqrt(0.2 * 0.8 / rows);
  ok(Math.abs(share - 0.2) < 4 * sd, `share of b.txt ${share.toFixed(4)} ≈ 0.2 (±${(4 * sd).toFixed(4)})`);
});

function indexOfRow(hay: Int32Array, row: number[]): number {
  outer: for (let i = 0; i + row.length <= hay.length; i++) {
    for (let j = 0; j < row.length; j++) if (hay[i + j] !== row[j]) continue outer;
    return i;
  }
  return -1;
}

gpuTest('replay: the batch rebuilt from (seed, step) is exactly what the trainer wrote to the GPU', async (gpu) => {
  const spec = `${A}:0.95,${B}:0.05`;
  const cfg = parseConfig({
    data: spec,
    nLayer: 1,
    nHead: 2,
    nEmbd: 16,
    blockSize: 16,
    batchSize: 16,
    steps: 6,
    warmup: 0,
    evalBatches: 1,
    seed: 5,
  });
  const { tokenizer, data } = await loadTrainingData(cfg);
  const model = new GPT(gpu, {
    vocabSize: tokenizer.vocabSize,
    blockSize: 16,
    nLayer: 1,
    nHead: 2,
    nEmbd: 16,
    bias: true,
  }, 1);
  const trainer = new Trainer(gpu, model, data, cfg);
  const trained: Int32Array[] = [];
  let sawB = false;
  for (let s = 0; s < cfg.steps; s++) {
    await trainer.step(s);
    trained.push(await gpu.read(trainer.tokens) as Int32Array);
  }
  // A fresh process would only know the config: reload the files and rebuild each step's batch.
  const again = await loadTrainingData(parseConfig({ ...cfg }));
  for (let s = 0; s < cfg.steps; s++) {
    const rebuilt = again.data.batch('train', cfg.batchSize, cfg.blockSize, cfg.seed, s, 0);
    deepStrictEqual(Array.from(trained[s]), Array.from(rebuilt.x), `step ${s}`);
    if (rebuilt.source.includes(1)) sawB = true;
  }
  ok(sawB, 'the replayed 5 % source appeared in some batch');
  // Gradient accumulation: the hook sees every micro-batch, rows [micro·B, (micro+1)·B) of the step's global batch,
  // which is the plain run's batch of 2·B rows (data/dataset.ts batch order).
  const acc = new Trainer(gpu, model, data, parseConfig({ ...cfg, gradAccum: 2 }));
  const seen: string[] = [];
  acc.onBatch = (step, micro, batch) => {
    deepStrictEqual(
      batch.x,
      again.data.batch('train', 32, 16, 5, step).x.slice(micro * 16 * 16, (micro + 1) * 16 * 16),
    );
    seen.push(`${step}.${micro}`);
  };
  await acc.step(3);
  await acc.drain();
  deepStrictEqual(seen, ['3.0', '3.1']);
  // Per-corpus validation is the single-file validation of that corpus.
  const perSource = await trainer.evaluateSources('val');
  const solo = new Trainer(gpu, model, data.sources[1], cfg);
  equal(perSource[1], await solo.evaluate('val'));
  ok(perSource[0] !== perSource[1], `two corpora, two losses: ${perSource}`);
  ok(
    await trainer.evaluate('val', 2).then(() => false, (e) => /source 2 does not exist/.test(e.message)),
    'a bad source index is refused',
  );
  model.params.destroy();
});

Deno.test({
  name: 'train CLI: a mixture run logs per-corpus val loss and data.json; bad specs are one-line errors',
  sanitizeResources: false,
  fn: async () => {
    const out = `${dir}/run`;
    const r = await runCli('train.ts', [
      '--data',
      `${A}:0.7,${B}:0.3`,
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
      '3',
      '--warmup',
      '0',
      '--eval-batches',
      '1',
      '--sample-tokens',
      '0',
      '--out',
      out,
    ]);
    equal(r.code, 0, r.stderr);
    const data = JSON.parse(await Deno.readTextFile(`${out}/data.json`));
    deepStrictEqual(data.sources.map((s: { weight: number }) => s.weight), [0.7, 0.3]);
    const last = (await Deno.readTextFile(`${out}/metrics.jsonl`)).trim().split('\n').map((l) => JSON.parse(l)).find((
      o,
    ) => o.val_loss_by_source);
    ok(
      last && Object.keys(last.val_loss_by_source).length === 2,
      `per-source val loss in metrics: ${JSON.stringify(last)}`,
    );
    for (
      const [spec, pattern] of [
        [`${A}:0.7,${dir}/missing.txt:0.3`, /Data file '.*missing\.txt' not found/],
        [`${A}:0.7,${B}:0.4`, /weights sum to 1\.1/],
        [`${A}:0.7,${B}`, /has no weight/],
      ] as const
    ) {
      const bad = await runCli('train.ts', ['--data', spec, '--steps', '1']);
      equal(bad.code, 1);
      const lines = bad.stderr.trim().split('\n').filter((l) => l.startsWith('error:'));
      equal(lines.length, 1, bad.stderr);
      match(lines[0], pattern);
    }
  },
});

Deno.test({
  name:
    'train CLI: --resume may switch --data to a replay mixture; characters outside the checkpoint vocabulary are a clear error',
  sanitizeResources: false,
  fn: async () => {
    const out = `${dir}/cont`;
    const C = `${dir}/c.txt`;
    // Other text over the same characters as a.txt: its lines in reverse order.
    await Deno.writeTextFile(C, shakespeare.slice(0, 20_000).split('\n').reverse().join('\n'));
    const small = [
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
      '--warmup',
      '0',
      '--eval-batches',
      '1',
      '--sample-tokens',
      '0',
    ];
    const pre = await runCli('train.ts', [...small, '--data', A, '--steps', '2', '--out', out]);
    equal(pre.code, 0, pre.stderr);
    const cont = await runCli('train.ts', [
      '--out',
      out,
      '--resume',
      '--steps',
      '4',
      '--data',
      `${C}:0.95,${A}:0.05`,
      '--schedule',
      'rewarm-cosine',
      '--lr',
      '1e-3',
    ]);
    equal(cont.code, 0, cont.stderr);
    ok(/resuming at step 2/.test(cont.stdout), cont.stdout);
    const data = JSON.parse(await Deno.readTextFile(`${out}/data.json`));
    equal(data.spec, `${C}:0.95,${A}:0.05`);
    const bad = await runCli('train.ts', ['--out', out, '--resume', '--steps', '6', '--data', B]);
    equal(bad.code, 1);
    match(
      bad.stderr,
      /error: data file '.*b\.txt': Character .* is not in the \d+-character vocabulary \(the run's tokenizer was built from other data\)/,
    );
  },
});
