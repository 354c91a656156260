/**
 * `topk`: validation loss of one trained GPT when each query attends to its k largest scores
 * only (top-k attention at inference, arXiv 2502.06766; `--topk-attention`, exact select-k in
 * kernels/select_k.ts), for k from 1 to the whole context. The model is trained once with full
 * attention; only the evaluation changes, on the same fixed validation batches.
 */
import {
  corpus,
  type Experiment,
  type ExperimentContext,
  intFlag,
  listFlag,
  modelFlags,
  trainSteps,
  writeOut,
} from './common.ts';
import { csv, lineChart, markdownTable } from './report.ts';
import { CharTokenizer } from '../data/tokenizer.ts';
import { TextDataset } from '../data/dataset.ts';
import { parseConfig } from '../train/config.ts';
import { Trainer } from '../train/trainer.ts';
import { createModel } from '../models/registry.ts';
import { meanLoss } from '../train/evaluate.ts';

async function run(ctx: ExperimentContext): Promise<string> {
  const f = ctx.flags;
  const shape = modelFlags(f, { nLayer: 2, nEmbd: 64, nHead: 4, blockSize: 128, batchSize: 16 });
  const steps = intFlag(f, 'steps', 400);
  const T = shape.blockSize;
  const ks = listFlag(f, 'ks', [1, 2, 4, 8, 16, 32, 64, 128], 1).filter((k) => k <= T);
  if (!ks.includes(T)) ks.push(T); // the full-attention reference
  const text = await corpus('tinyshakespeare.txt');
  const tok = CharTokenizer.fromText(text);
  const data = new TextDataset(tok.encode(text), T, 0.1, 'tinyshakespeare.txt');
  const cfg = parseConfig({ ...shape, steps, warmup: 20, lr: 3e-3, minLr: 3e-4, logInterval: steps });
  const model = createModel(ctx.gpu, cfg, tok.vocabSize);
  ctx.log(`topk: ${model.describe()} · ${steps} steps on Tiny Shakespeare, then val loss with k ∈ {${ks.join(', ')}}`);
  const trainer = new Trainer(ctx.gpu, model, data, cfg);
  await trainSteps(trainer, 0, steps, 'topk');
  const flash = await trainer.evaluate('val');
  const rows: { k: number; loss: number }[] = [];
  for (const k of ks) {
    const loss = await meanLoss(ctx.gpu, model, data, { ...cfg, topkAttention: k }, 'val');
    rows.push({ k, loss });
    ctx.log(`topk k=${k} (${((100 * k) / T).toFixed(1)}% of T) · val loss ${loss.toFixed(4)}`);
  }
  model.params.destroy();
  const full = rows.find((r) => r.k === T)!.loss;
  // Loss above the unigram baseline that each k recovers: 1 at full attention.
  const unigram = Math.log(tok.vocabSize);
  const headers = ['k', 'share of T', 'val loss', 'Δ vs full', 'perplexity ratio', 'of the gain over log V kept'];
  const table = rows.map((r) => [
    r.k,
    `${((100 * r.k) / T).toFixed(1)}%`,
    r.loss,
    (r.loss - full).toFixed(4),
    Math.exp(r.loss - full).toFixed(3),
    `${((100 * (unigram - r.loss)) / (unigram - full)).toFixed(1)}%`,
  ]);
  await writeOut(
    ctx,
    'topk.svg',
    lineChart({
      title: `Top-k attention at inference: val loss (T = ${T})`,
      xLabel: 'log₂ k (keys each query attends to)',
      yLabel: 'val loss (nats/char)',
      series: [
        { name: 'top-k', points: rows.map((r) => [Math.log2(r.k), r.loss] as [number, number]) },
        { name: 'full attention', dashed: true, points: rows.map((r) => [Math.log2(r.k), full] as [number, number]) },
      ],
    }),
  );
  await writeOut(
    ctx,
    'topk.csv',
    csv(['k', 'share_of_T', 'val_loss', 'delta_vs_full'], rows.map((r) => [r.k, r.k / T, r.loss, r.loss - full])),
  );
  const md =
    `## topk\n\n${model.describe()}, trained ${steps} steps with full attention (val loss ${
      flash.toFixed(4)
    } with FlashAttention); evaluated on the same ${cfg.evalBatches} validation batches with each query's softmax over its k largest scores (the materialised kernel with an exact select-k).\n\n` +
    markdownTable(headers, table) + `\nPlot: topk.svg; values: topk.csv.\n`;
  await writeOut(ctx, 'results.md', md);
  return md;
}

export const topk: Experiment = {
  name: 'topk',
  help:
    'topk        val loss of a trained GPT with top-k attention at inference (each query attends to its k largest scores), k from 1 to T\n' +
    '            --steps 400 --ks 1,2,4,8,16,32,64,128 (shared flags: block 128 by default)',
  run,
};
