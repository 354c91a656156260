/**
 * `depth`: test-time compute of a recurrent-depth model (Geiping et al., arXiv 2502.05171;
 * docs/design.md#recurrent-depth). One small model is trained on Tiny Shakespeare with r drawn per step
 * (mean r̄, truncated backprop through the last k iterations); at several points of training its
 * validation loss is measured at test-time iterations r = 1, 2, 4, 8, 16 — the same weights,
 * only the number of core iterations changes. The paper's claim at scale: loss keeps falling as r
 * grows past the training mean, and saturates.
 */
import {
  corpus,
  type Experiment,
  type ExperimentContext,
  intFlag,
  listFlag,
  modelFlags,
  numFlag,
  trainWithEvals,
  writeOut,
} from './common.ts';
import { csv, lineChart, markdownTable } from './report.ts';
import { CharTokenizer } from '../data/tokenizer.ts';
import { TextDataset } from '../data/dataset.ts';
import { parseConfig } from '../train/config.ts';
import { Trainer } from '../train/trainer.ts';
import { createModel } from '../models/registry.ts';
import type { RecurrentDepth } from '../models/recurrent_depth.ts';

async function run(ctx: ExperimentContext): Promise<string> {
  const f = ctx.flags;
  // 16 validation batches (not 4): the differences between test-time r are a few hundredths of a nat.
  const shape = {
    ...modelFlags(f, { nLayer: 4, nEmbd: 64, nHead: 4, blockSize: 32, batchSize: 16 }),
    evalBatches: intFlag(f, 'eval-batches', 16),
  };
  const steps = intFlag(f, 'steps', 1200);
  const every = intFlag(f, 'eval-every', 200);
  const rs = listFlag(f, 'iterations', [1, 2, 4, 8, 16], 1).map(Math.round);
  const rbar = intFlag(f, 'recur-iters', 4);
  const k = intFlag(f, 'recur-backprop', 2);
  const lr = numFlag(f, 'lr', 3e-3, 0, 1, true);
  const text = await corpus('tinyshakespeare.txt');
  const tok = CharTokenizer.fromText(text);
  const data = new TextDataset(tok.encode(text), shape.blockSize, 0.1, 'tinyshakespeare.txt');
  const cfg = parseConfig({
    ...shape,
    arch: 'recurrent-depth',
    preludeLayers: 1,
    codaLayers: 1,
    recurIters: rbar,
    recurBackprop: k,
    steps,
    warmup: 30,
    lr,
    minLr: lr / 10,
    logInterval: every,
  });
  const model = createModel(ctx.gpu, cfg, tok.vocabSize) as RecurrentDepth;
  ctx.log(`depth: ${model.describe()} · ${steps} steps · test-time r ∈ {${rs.join(', ')}}`);
  const trainer = new Trainer(ctx.gpu, model, data, cfg);
  // Validation at every r from the same weights; training's r is restored by the trainer itself.
  const sweep = async () => {
    const out: Record<string, number> = {};
    for (const r of rs) {
      model.iterations = r;
      out[`r${r}`] = await trainer.evaluate('val');
    }
    model.iterations = model.evalIterations;
    return out;
  };
  const t0 = performance.now();
  const { evals } = await trainWithEvals(trainer, 0, steps, every, sweep, ctx.log, 'depth');
  const minutes = (performance.now() - t0) / 60000;
  const end = evals[evals.length - 1];
  const rows = rs.map((r) => [
    r,
    (model.forwardFlopsPerToken(shape.blockSize, r) / 1e6).toFixed(2),
    end[`r${r}`],
    end[`r${rbar}`] === undefined ? '—' : (end[`r${r}`] - end[`r${rbar}`]).toFixed(4),
  ]);
  model.params.destroy();
  const headers = ['test-time r', 'forward MFLOP/token', 'val loss', `vs r = ${rbar} (the training mean)`];
  const series = evals.filter((e) => e.step > 0).map((e, i, all) => ({
    name: `after ${e.step} steps`,
    dashed: i < all.length - 1,
    points: rs.map((r) => [Math.log2(r), e[`r${r}`]] as [number, number]),
  }));
  await writeOut(
    ctx,
    'depth.svg',
    lineChart({
      title: `Recurrent depth (train r̄ = ${rbar}, k = ${k}): val loss vs test-time iterations`,
      xLabel: 'log₂ r (core iterations at test time)',
      yLabel: 'val loss (nats/char)',
      series,
    }),
  );
  // The curves sit a few hundredths of a nat apart against a fall of 0.4 over training: the same
  // evaluations relative to r = 1 show their shape.
  await writeOut(
    ctx,
    'depth_delta.svg',
    lineChart({
      title: `Recurrent depth: val loss at r minus val loss at r = ${rs[0]}`,
      xLabel: 'log₂ r (core iterations at test time)',
      yLabel: 'Δ val loss (nats/char)',
      series: series.map((x) => ({
        ...x,
        points: x.points.map(([lr, v]) => [lr, v - x.points[0][1]] as [number, number]),
      })),
    }),
  );
  await writeOut(
    ctx,
    'depth.csv',
    csv(['step', 'r', 'val_loss'], evals.flatMap((e) => rs.map((r) => [e.step, r, e[`r${r}`]]))),
  );
  const md =
    `## depth\n\n${model.describe()}, batch ${shape.batchSize}, ${steps} steps on Tiny Shakespeare (${
      minutes.toFixed(1)
    } min of training and evaluation). Validation loss of the final weights at each test-time r:\n\n` +
    markdownTable(headers, rows) +
    `\nPlots: depth.svg, depth_delta.svg (relative to r = ${rs[0]}); every evaluation: depth.csv.\n`;
  await writeOut(ctx, 'results.md', md);
  return md;
}

export const depth: Experiment = {
  name: 'depth',
  help:
    'depth       recurrent-depth model: val loss at test-time core iterations r after training with r drawn per step (mean --recur-iters, backprop through the last --recur-backprop)\n' +
    '            --steps 1200 --eval-every 200 --iterations 1,2,4,8,16 --recur-iters 4 --recur-backprop 2 --lr 3e-3 (shared: --n-layer 4 = prelude 1 + core 2 + coda 1, --eval-batches 16)',
  run,
};
