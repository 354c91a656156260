/**
 * `goldfish`: goldfish loss (Hans et al. arXiv 2406.10209) against plain training when one
 * document is seen many times: a Shakespeare passage, repeated, mixed into ordinary Shakespeare
 * training text, trained until the plain model reproduces it. Pythia-style memorization (prompt, greedy continuation; arXiv 2304.11158) on
 * the passage and validation loss on held-out Shakespeare are compared over training.
 */
import {
  corpus,
  type EvalPoint,
  type Experiment,
  type ExperimentContext,
  intFlag,
  modelFlags,
  numFlag,
  trainWithEvals,
  writeOut,
} from './common.ts';
import { csv, lineChart, markdownTable, type Series } from './report.ts';
import { CharTokenizer } from '../data/tokenizer.ts';
import { type Split, TextDataset } from '../data/dataset.ts';
import { MixtureDataset } from '../data/mixture.ts';
import { parseConfig } from '../train/config.ts';
import { Trainer } from '../train/trainer.ts';
import { createModel } from '../models/registry.ts';
import { measureMemorization } from '../train/memorization.ts';

async function run(ctx: ExperimentContext): Promise<string> {
  const f = ctx.flags;
  const shape = modelFlags(f, { nLayer: 2, nEmbd: 64, nHead: 4, blockSize: 64, batchSize: 8 });
  const steps = intFlag(f, 'steps', 600);
  const every = intFlag(f, 'eval-every', 100);
  const passageLen = intFlag(f, 'passage', 500, 16);
  const k = intFlag(f, 'k', 4, 2);
  const h = intFlag(f, 'h', 13);
  const samples = intFlag(f, 'samples', 32);
  const promptLen = intFlag(f, 'prompt', 32);
  const continuation = intFlag(f, 'continuation', 32);
  const lr = numFlag(f, 'lr', 1e-2, 0, 1, true);
  const share = numFlag(f, 'passage-share', 0.5, 0, 1, true);
  if (promptLen + continuation - 1 > shape.blockSize) {
    throw new Error(
      `--prompt (${promptLen}) + --continuation (${continuation}) − 1 must fit the block size (${shape.blockSize}); raise --block-size`,
    );
  }
  const text = await corpus('tinyshakespeare.txt');
  const tok = CharTokenizer.fromText(text);
  // As in the paper's setup, the repeated document is mixed into ordinary training text: the
  // passage (first `passage` characters, repeated like a duplicated document) takes `share` of
  // the rows, the rest is Tiny Shakespeare's train split, and its held-out tail gives val loss.
  const passage = tok.encode(text.slice(0, passageLen));
  const copies = Math.max(4, Math.ceil((4 * shape.blockSize) / passage.length) * 4);
  const repeated = new Int32Array(copies * passage.length);
  for (let i = 0; i < copies; i++) repeated.set(passage, i * passage.length);
  const passageData = new TextDataset(repeated, shape.blockSize, 1 / copies, 'repeated passage');
  const general = new TextDataset(tok.encode(text), shape.blockSize, 0.1, 'tinyshakespeare.txt');
  const data = new MixtureDataset([passageData, general], [share, 1 - share], ['passage', 'tinyshakespeare.txt']);
  // Memorization windows: the passage (seen many times) against held-out Shakespeare.
  const probe = {
    batch: (
      split: Split,
      b: number,
      t: number,
      seed: number,
      step: number,
    ) => (split === 'train' ? passageData.batch('train', b, t, seed, step) : general.batch('val', b, t, seed, step)),
  };

  const results: { name: string; evals: EvalPoint[] }[] = [];
  for (const [name, gk] of [['standard loss', 0], [`goldfish k=${k} h=${h}`, k]] as const) {
    const cfg = parseConfig({
      ...shape,
      steps,
      warmup: 20,
      lr,
      minLr: lr / 10,
      goldfishK: gk,
      goldfishH: h,
      logInterval: every,
      data: 'public/data/tinyshakespeare.txt',
    });
    const model = createModel(ctx.gpu, cfg, tok.vocabSize);
    const trainer = new Trainer(ctx.gpu, model, data, cfg);
    const evaluate = async () => {
      const m = await measureMemorization(ctx.gpu, model, probe, { samples, seed: 1, promptLen, continuation });
      return {
        valLoss: await trainer.evaluate('val', 1),
        trainLoss: await trainer.evaluate('train', 0),
        exactMatch: m.train.exactMatch,
        score: m.train.score,
        heldOutScore: m.val.score,
      };
    };
    if (results.length === 0) {
      ctx.log(
        `goldfish: ${model.describe()} · passage of ${passage.length} chars, ${
          share * 100
        }% of rows · ${steps} steps · memorization on ${samples} windows (${promptLen} + ${continuation})`,
      );
    }
    results.push({ name, evals: (await trainWithEvals(trainer, 0, steps, every, evaluate, ctx.log, name)).evals });
    model.params.destroy();
  }

  const headers = [
    'run',
    'exact match (passage)',
    'memorization score (passage)',
    'score (held-out)',
    'passage loss (all tokens)',
    'held-out val loss',
  ];
  const rows = results.map((r) => {
    const e = r.evals[r.evals.length - 1];
    return [r.name, `${(e.exactMatch * 100).toFixed(1)}%`, e.score, e.heldOutScore, e.trainLoss, e.valLoss];
  });
  const series: Series[] = results.flatMap((r, i) => [
    { name: `${r.name} · score`, points: r.evals.map((e) => [e.step, e.score] as [number, number]), color: i },
    {
      name: `${r.name} · exact`,
      points: r.evals.map((e) => [e.step, e.exactMatch] as [number, number]),
      dashed: true,
      color: i,
    },
  ]);
  await writeOut(
    ctx,
    'goldfish.svg',
    lineChart({
      title: 'Memorization of a repeated passage (greedy 32 after 32)',
      xLabel: 'step',
      yLabel: 'share reproduced',
      series,
      yRange: [0, 1],
      width: 800,
    }),
  );
  const loss: Series[] = results.map((r) => ({
    name: r.name,
    points: r.evals.map((e) => [e.step, e.valLoss] as [number, number]),
  }));
  await writeOut(
    ctx,
    'goldfish_val.svg',
    lineChart({ title: 'Held-out Shakespeare val loss', xLabel: 'step', yLabel: 'val loss', series: loss, width: 800 }),
  );
  await writeOut(
    ctx,
    'goldfish.csv',
    csv(
      ['run', 'step', 'exact_match', 'score', 'held_out_score', 'passage_loss', 'val_loss'],
      results.flatMap((r) =>
        r.evals.map((e) => [r.name, e.step, e.exactMatch, e.score, e.heldOutScore, e.trainLoss, e.valLoss])
      ),
    ),
  );
  const md =
    `## goldfish\n\nPassage: first ${passage.length} characters of Tiny Shakespeare, repeated, drawn for ${
      share * 100
    }% of the training rows; the other rows are Tiny Shakespeare's train split; held-out: its last 10%. ` +
    `${steps} steps, batch ${shape.batchSize} × ${shape.blockSize}. Memorization on ${samples} windows of the passage (prompt ${promptLen}, greedy ${continuation}).\n\n` +
    markdownTable(headers, rows) +
    `\nPlots: goldfish.svg (memorization over training), goldfish_val.svg; every evaluation: goldfish.csv.\n`;
  await writeOut(ctx, 'results.md', md);
  return md;
}

export const goldfish: Experiment = {
  name: 'goldfish',
  help:
    'goldfish    plain vs goldfish loss on a repeated Shakespeare passage: memorization (exact match, score) and held-out val loss\n' +
    '            --steps 600 --eval-every 100 --passage 500 --passage-share 0.5 --k 4 --h 13 --samples 32 --prompt 32 --continuation 32 --lr 1e-2',
  run,
};
