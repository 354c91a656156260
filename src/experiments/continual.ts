/**
 * `continual`: continual pre-training (Gupta et al. arXiv 2308.04014; Ibrahim et al. arXiv
 * 2403.08763). Pre-train on Tiny Shakespeare with cosine decay, then continue on War and Peace
 * from the same checkpoint with (a) a constant LR equal to the final one (no re-warm),
 * (b) linear re-warm to each of several maxima and cosine re-decay, (c) the re-warm to the
 * highest maximum plus a replay share of Shakespeare. Validation loss on both corpora over time
 * shows adaptation (War and Peace) against forgetting (Shakespeare).
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
import { csv, lineChart, markdownTable, type Series } from './report.ts';
import { CharTokenizer } from '../data/tokenizer.ts';
import { TextDataset } from '../data/dataset.ts';
import { MixtureDataset } from '../data/mixture.ts';
import { parseConfig } from '../train/config.ts';
import { Trainer } from '../train/trainer.ts';
import { createModel } from '../models/registry.ts';

const SH = 'tinyshakespeare.txt';
const WP = 'warandpeace.txt';

async function run(ctx: ExperimentContext): Promise<string> {
  const f = ctx.flags;
  const shape = modelFlags(f, { nLayer: 2, nEmbd: 64, nHead: 4, blockSize: 32, batchSize: 16 });
  const pre = intFlag(f, 'pretrain-steps', 240);
  const cont = intFlag(f, 'continue-steps', 160);
  const every = intFlag(f, 'eval-every', 20);
  const lr = numFlag(f, 'lr', 3e-3, 0, 1, true);
  const minLr = numFlag(f, 'min-lr', 3e-4, 0, lr);
  const maxima = listFlag(f, 'maxima', [1e-3, 3e-3], 1e-12);
  const replay = numFlag(f, 'replay', 0.05, 0, 1, true);
  const rewarm = intFlag(f, 'rewarm-steps', Math.max(1, Math.round(cont / 10)));
  if (rewarm >= cont) throw new Error(`--rewarm-steps (${rewarm}) must be shorter than --continue-steps (${cont})`);

  const [sh, wp] = [await corpus(SH), await corpus(WP)];
  // One char vocabulary over both corpora, so the pre-trained model can read the new one.
  const tok = CharTokenizer.fromText(sh + wp);
  const shData = new TextDataset(tok.encode(sh), shape.blockSize, 0.1, SH);
  const wpData = new TextDataset(tok.encode(wp), shape.blockSize, 0.1, WP);
  const base = { ...shape, warmup: 20, lr, minLr, logInterval: every, ckptInterval: 0, sampleTokens: 0 };
  const preCfg = parseConfig({ ...base, steps: pre, data: `public/data/${SH}` });
  const model = createModel(ctx.gpu, preCfg, tok.vocabSize);
  ctx.log(
    `continual: ${model.describe()} · vocab ${tok.vocabSize} (union of both corpora) · pre-train ${pre} + continue ${cont} steps`,
  );
  const evalTrainer = new Trainer(ctx.gpu, model, new MixtureDataset([shData, wpData], [0.5, 0.5], [SH, WP]), preCfg);
  const evaluate = async () => {
    const [s, w] = await evalTrainer.evaluateSources('val');
    return { shakespeare: s, warandpeace: w };
  };

  const preRun = await trainWithEvals(
    new Trainer(ctx.gpu, model, shData, preCfg),
    0,
    pre,
    every,
    evaluate,
    ctx.log,
    'pretrain',
  );
  const finalLr = new Trainer(ctx.gpu, model, shData, preCfg).lrAt(pre - 1);
  const snap = await snapshot(model, preCfg, tok.toJSON(), pre);

  // Replay goes with the highest re-warm, where forgetting is largest (Ibrahim et al. §5).
  const top = Math.max(...maxima);
  const runs: { name: string; maxLr: number; replay: number; cfg: Record<string, unknown> }[] = [
    {
      name: `constant ${finalLr.toExponential(1)}`,
      maxLr: finalLr,
      replay: 0,
      cfg: { schedule: 'constant', warmup: 0, cooldownFrac: 0, lr: finalLr, minLr: finalLr },
    },
    ...maxima.map((m) => ({
      name: `re-warm ${m.toExponential(1)}`,
      maxLr: m,
      replay: 0,
      cfg: {
        schedule: 'rewarm-cosine',
        warmup: rewarm,
        lr: m,
        minLr: Math.min(finalLr, m),
        rewarmStart: pre,
        rewarmFrom: Math.min(finalLr, m),
      },
    })),
    {
      name: `re-warm ${top.toExponential(1)} + ${replay * 100}% replay`,
      maxLr: top,
      replay,
      cfg: {
        schedule: 'rewarm-cosine',
        warmup: rewarm,
        lr: top,
        minLr: Math.min(finalLr, top),
        rewarmStart: pre,
        rewarmFrom: Math.min(finalLr, top),
      },
    },
  ];
  const results: { name: string; maxLr: number; replay: number; evals: EvalPoint[] }[] = [];
  for (const r of runs) {
    await restore(model, snap);
    const data = r.replay > 0 ? new MixtureDataset([wpData, shData], [1 - r.replay, r.replay], [WP, SH]) : wpData;
    const cfg = parseConfig({
      ...base,
      steps: pre + cont,
      ...r.cfg,
      data: r.replay > 0 ? `public/data/${WP}:${1 - r.replay},public/data/${SH}:${r.replay}` : `public/data/${WP}`,
    });
    const out = await trainWithEvals(
      new Trainer(ctx.gpu, model, data, cfg),
      pre,
      pre + cont,
      every,
      evaluate,
      ctx.log,
      r.name,
    );
    results.push({ ...r, evals: out.evals });
  }
  model.params.destroy();

  const start = preRun.evals[preRun.evals.length - 1];
  const headers = [
    'run',
    'peak LR',
    'replay',
    'War and Peace val (end)',
    'Shakespeare val (end)',
    'Shakespeare forgetting',
    'W&P best',
  ];
  const rows = results.map((r) => {
    const end = r.evals[r.evals.length - 1];
    return [
      r.name,
      r.maxLr.toExponential(1),
      `${r.replay * 100}%`,
      end.warandpeace,
      end.shakespeare,
      end.shakespeare - start.shakespeare,
      Math.min(...r.evals.map((e) => e.warandpeace)),
    ];
  });
  const series: Series[] = [
    { name: 'pretrain · W&P', points: preRun.evals.map((e) => [e.step, e.warandpeace]), color: 7 },
    {
      name: 'pretrain · Shakespeare',
      points: preRun.evals.map((e) => [e.step, e.shakespeare]),
      dashed: true,
      color: 7,
    },
  ];
  results.forEach((r, i) => {
    series.push({ name: `${r.name} · W&P`, points: r.evals.map((e) => [e.step, e.warandpeace]), color: i });
    series.push({
      name: `${r.name} · Shak.`,
      points: r.evals.map((e) => [e.step, e.shakespeare]),
      dashed: true,
      color: i,
    });
  });
  // The y axis starts after the first quarter of pre-training, so the continuation is readable.
  const shown = series.flatMap((s) => s.points.filter(([x]) => x >= pre / 4).map(([, y]) => y));
  const yRange: [number, number] = [Math.min(...shown) - 0.05, Math.max(...shown) + 0.05];
  await writeOut(
    ctx,
    'continual.svg',
    lineChart({
      title: 'Continual pre-training: Shakespeare → War and Peace (val loss)',
      xLabel: 'step',
      yLabel: 'val loss (nats/char)',
      series,
      yRange,
      width: 900,
      height: 480,
    }),
  );
  const allEvals = [
    ...preRun.evals.map((e) => ['pretrain', e.step, e.shakespeare, e.warandpeace]),
    ...results.flatMap((r) => r.evals.map((e) => [r.name, e.step, e.shakespeare, e.warandpeace])),
  ];
  await writeOut(
    ctx,
    'continual.csv',
    csv(['run', 'step', 'shakespeare_val', 'warandpeace_val'], allEvals as (string | number)[][]),
  );
  const md =
    `## continual\n\n${model.describe()}, vocab ${tok.vocabSize}; pre-train ${pre} steps on Shakespeare (cosine ${lr} → ${minLr}, final LR ${
      finalLr.toExponential(2)
    }), ` +
    `then ${cont} steps on War and Peace (re-warm ${rewarm} steps). At the switch: Shakespeare val ${
      start.shakespeare.toFixed(4)
    }, War and Peace val ${start.warandpeace.toFixed(4)}.\n\n` +
    markdownTable(headers, rows) +
    `\nForgetting = Shakespeare val loss at the end minus at the switch. Plot: continual.svg; every evaluation: continual.csv.\n`;
  await writeOut(ctx, 'results.md', md);
  return md;
}

export const continual: Experiment = {
  name: 'continual',
  help:
    'continual   pre-train on Tiny Shakespeare, continue on War and Peace: constant LR vs re-warmed cosine to several maxima vs re-warm + replay\n' +
    '            --pretrain-steps 240 --continue-steps 160 --eval-every 20 --lr 3e-3 --min-lr 3e-4 --maxima 1e-3,3e-3 --rewarm-steps (10% of continue) --replay 0.05',
  run,
};
