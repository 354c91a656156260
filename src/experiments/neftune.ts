/**
 * `neftune`: validation loss with NEFTune embedding noise (Jain et al. arXiv 2310.05914) at
 * several α against α = 0. By default in the paper's regime, fine-tuning: a model pre-trained
 * without noise on Tiny Shakespeare is fine-tuned for several epochs on a small War and Peace
 * excerpt, once per α from the same snapshot and with the same batches (the noise is the only
 * difference); `--pretrain-steps 0` instead trains from scratch on Tiny Shakespeare.
 */
import {
  corpus,
  type EvalPoint,
  type Experiment,
  type ExperimentContext,
  intFlag,
  listFlag,
  modelFlags,
  numFlag,
  restore,
  snapshot,
  trainWithEvals,
  writeOut,
} from './common.ts';
import { csv, lineChart, markdownTable } from './report.ts';
import { CharTokenizer } from '../data/tokenizer.ts';
import { TextDataset } from '../data/dataset.ts';
import { parseConfig } from '../train/config.ts';
import { Trainer } from '../train/trainer.ts';
import { createModel } from '../models/registry.ts';

async function run(ctx: ExperimentContext): Promise<string> {
  const f = ctx.flags;
  const shape = modelFlags(f, { nLayer: 2, nEmbd: 64, nHead: 4, blockSize: 32, batchSize: 16 });
  const pre = intFlag(f, 'pretrain-steps', 200, 0);
  const steps = intFlag(f, 'steps', 250);
  const every = intFlag(f, 'eval-every', 25);
  const alphas = listFlag(f, 'alphas', [0, 1, 5, 15], 0);
  const lr = numFlag(f, 'lr', 3e-3, 0, 1, true);
  const ftChars = intFlag(f, 'finetune-chars', 30_000, 1000);
  const sh = await corpus('tinyshakespeare.txt');
  // The fine-tuning excerpt starts past War and Peace's front matter.
  const ft = pre > 0 ? (await corpus('warandpeace.txt')).slice(100_000, 100_000 + ftChars) : '';
  const tok = CharTokenizer.fromText(sh + ft);
  const shData = new TextDataset(tok.encode(sh), shape.blockSize, 0.1, 'tinyshakespeare.txt');
  const data = pre > 0 ? new TextDataset(tok.encode(ft), shape.blockSize, 0.1, 'War and Peace excerpt') : shData;
  const base = { ...shape, warmup: 20, lr, minLr: lr / 10, logInterval: every };
  const model = createModel(ctx.gpu, parseConfig({ ...base, steps: Math.max(1, pre) }), tok.vocabSize);
  const setting = pre > 0
    ? `pre-train ${pre} steps on Tiny Shakespeare without noise, then fine-tune ${steps} steps on ${ft.length} characters of War and Peace (${data.train.length} train / ${data.val.length} val, ${
      ((steps * shape.batchSize * shape.blockSize) / data.train.length).toFixed(1)
    } epochs)`
    : `${steps} steps from scratch on Tiny Shakespeare`;
  ctx.log(
    `neftune: ${model.describe()} · ${setting} · α ∈ {${
      alphas.join(', ')
    }} · noise scale α/√(${shape.blockSize}·${shape.nEmbd})`,
  );
  let snap: Uint8Array | null = null;
  if (pre > 0) {
    const preCfg = parseConfig({ ...base, steps: pre });
    await trainWithEvals(
      new Trainer(ctx.gpu, model, shData, preCfg),
      0,
      pre,
      pre,
      () => Promise.resolve({}),
      ctx.log,
      'pretrain',
    );
    snap = await snapshot(model, preCfg, tok.toJSON(), pre);
  } else {
    snap = await snapshot(model, parseConfig({ ...base, steps }), tok.toJSON(), 0);
  }
  const results: { alpha: number; evals: EvalPoint[] }[] = [];
  for (const alpha of alphas) {
    await restore(model, snap);
    // Fine-tuning warms up again from 0 and decays over its own steps (rewarm-cosine from the snapshot's step).
    const sched = pre > 0
      ? { schedule: 'rewarm-cosine', rewarmStart: pre, rewarmFrom: 0, warmup: Math.max(1, Math.round(steps / 10)) }
      : {};
    const cfg = parseConfig({ ...base, ...sched, steps: pre + steps, neftuneAlpha: alpha });
    const trainer = new Trainer(ctx.gpu, model, data, cfg);
    const evaluate = async () => ({
      valLoss: await trainer.evaluate('val'),
      trainLoss: await trainer.evaluate('train'),
    });
    results.push({
      alpha,
      evals: (await trainWithEvals(trainer, pre, pre + steps, every, evaluate, ctx.log, `α=${alpha}`)).evals,
    });
  }
  model.params.destroy();
  const headers = ['α', 'noise scale α/√(T·C)', 'val loss (end)', 'best val loss (step)', 'train loss (end, no noise)'];
  const rows = results.map((r) => {
    const e = r.evals[r.evals.length - 1];
    const best = r.evals.reduce((a, x) => (x.valLoss < a.valLoss ? x : a));
    return [
      r.alpha,
      (r.alpha / Math.sqrt(shape.blockSize * shape.nEmbd)).toFixed(4),
      e.valLoss,
      `${best.valLoss.toFixed(4)} (${best.step})`,
      e.trainLoss,
    ];
  });
  const series = results.map((r) => ({
    name: `α = ${r.alpha}`,
    points: r.evals.map((e) => [e.step, e.valLoss] as [number, number]),
  }));
  const what = pre > 0 ? 'fine-tuning on a War and Peace excerpt' : 'Tiny Shakespeare from scratch';
  await writeOut(
    ctx,
    'neftune.svg',
    lineChart({ title: `NEFTune, ${what}: validation loss`, xLabel: 'step', yLabel: 'val loss (nats/char)', series }),
  );
  await writeOut(
    ctx,
    'neftune.csv',
    csv(
      ['alpha', 'step', 'val_loss', 'train_loss'],
      results.flatMap((r) => r.evals.map((e) => [r.alpha, e.step, e.valLoss, e.trainLoss])),
    ),
  );
  const md =
    `## neftune\n\n${model.describe()}, batch ${shape.batchSize}; ${setting}. Same starting weights and batches for every α.\n\n` +
    markdownTable(headers, rows) + `\nPlot: neftune.svg; every evaluation: neftune.csv.\n`;
  await writeOut(ctx, 'results.md', md);
  return md;
}

export const neftune: Experiment = {
  name: 'neftune',
  help:
    'neftune     validation loss with NEFTune noise at several α vs without: fine-tuning a Shakespeare model on a War and Peace excerpt (--pretrain-steps 0: from scratch)\n' +
    '            --pretrain-steps 200 --steps 250 --finetune-chars 30000 --eval-every 25 --alphas 0,1,5,15 --lr 3e-3',
  run,
};
