/**
 * `scaling`: a small scaling-law study after gemstones (arXiv 2502.06857). A grid of GPT widths ×
 * depths, each trained once with a warmup–stable–decay schedule whose constant phase is branched
 * into cooldowns at several token counts (Hägele et al. arXiv 2405.18392: one run gives one
 * (N, D) point per cooldown). Laws of loss against parameters and tokens, and against width,
 * depth and tokens, are fitted to every point (scaling_fit.ts) with bootstrap errors; then again
 * on one shape family alone (one depth, or one width) to show how the prescription moves with the
 * grid — the paper's point. docs/design.md#a-scaling-law-sweep.
 */
import {
  corpus,
  type Experiment,
  type ExperimentContext,
  intFlag,
  listFlag,
  numFlag,
  restore,
  snapshot,
  trainSteps,
  writeOut,
} from './common.ts';
import { csv, lineChart, markdownTable } from './report.ts';
import { bootstrap, computeOptimal, fitParamsLaw, fitShapeLaw, type LawFit, type ScalingPoint } from './scaling_fit.ts';
import { CharTokenizer } from '../data/tokenizer.ts';
import { TextDataset } from '../data/dataset.ts';
import { parseConfig } from '../train/config.ts';
import { Trainer } from '../train/trainer.ts';
import { createModel } from '../models/registry.ts';

/** A cooldown is a fifth of the branch's run: it starts at the branch step and lasts a quarter of it. */
const COOLDOWN_FRAC = 0.2;

async function run(ctx: ExperimentContext): Promise<string> {
  const f = ctx.flags;
  const widths = listFlag(f, 'widths', [32, 64, 96], 16);
  const depths = listFlag(f, 'depths', [1, 2, 4], 1);
  const branches = listFlag(f, 'branches', [30, 60, 120, 240, 480], 4).sort((a, b) => a - b);
  const headSize = intFlag(f, 'head-size', 16);
  const blockSize = intFlag(f, 'block-size', 64);
  const batchSize = intFlag(f, 'batch-size', 16);
  const evalBatches = intFlag(f, 'eval-batches', 4);
  const seed = intFlag(f, 'seed', 1337, 0);
  const lr = numFlag(f, 'lr', 3e-3, 0, 1, true);
  const rounds = intFlag(f, 'bootstrap', 50, 2);
  for (const w of widths) {
    if (w % headSize) throw new Error(`--widths: ${w} is not a multiple of --head-size ${headSize}`);
  }
  const text = await corpus('tinyshakespeare.txt');
  const tok = CharTokenizer.fromText(text);
  const data = new TextDataset(tok.encode(text), blockSize, 0.1, 'tinyshakespeare.txt');
  const tokensPerStep = batchSize * blockSize;
  const last = branches[branches.length - 1];
  const points: ScalingPoint[] = [];
  const t0 = performance.now();
  for (const depth of depths) {
    for (const width of widths) {
      const shape = { nLayer: depth, nEmbd: width, nHead: width / headSize, blockSize, batchSize, evalBatches, seed };
      // Warmup ends before the first branch: every cooldown starts from the constant phase.
      const sched = {
        schedule: 'wsd',
        warmup: Math.min(20, branches[0] >> 1),
        lr,
        minLr: lr / 10,
        cooldownFrac: COOLDOWN_FRAC,
      };
      const total = (b: number) => Math.round(b / (1 - COOLDOWN_FRAC));
      const trunkCfg = parseConfig({ ...shape, ...sched, steps: total(last), logInterval: last });
      const model = createModel(ctx.gpu, trunkCfg, tok.vocabSize);
      const trunk = new Trainer(ctx.gpu, model, data, trunkCfg);
      let step = 0;
      for (const b of branches) {
        await trainSteps(trunk, step, b, `scaling: w${width} d${depth} trunk`);
        step = b;
        const snap = await snapshot(model, trunkCfg, tok.toJSON(), b);
        const cfg = parseConfig({ ...shape, ...sched, steps: total(b), logInterval: total(b) });
        const branch = new Trainer(ctx.gpu, model, data, cfg);
        await trainSteps(branch, b, cfg.steps, `scaling: w${width} d${depth} cooldown at ${b}`);
        const loss = await branch.evaluate('val');
        branch.release();
        points.push({ n: model.numParams(), width, depth, tokens: cfg.steps * tokensPerStep, loss });
        ctx.log(
          `scaling w${width} d${depth} · ${model.numParams()} params · cooldown from step ${b} to ${cfg.steps} · val ${
            loss.toFixed(4)
          } · ${((performance.now() - t0) / 60000).toFixed(1)} min`,
        );
        await restore(model, snap);
      }
      trunk.release();
      model.params.destroy();
    }
  }
  const md = report(points, widths, depths, tokensPerStep, rounds);
  await writeOut(
    ctx,
    'scaling.csv',
    csv(
      ['params', 'width', 'depth', 'tokens', 'val_loss'],
      points.map((p) => [
        p.n,
        p.width,
        p.depth,
        p.tokens,
        p.loss,
      ]),
    ),
  );
  await writeOut(ctx, 'scaling.svg', chart(points));
  await writeOut(ctx, 'results.md', md);
  return md;
}

const pm = (x: number, e: number | undefined) => `${x.toFixed(3)} ± ${(e ?? NaN).toFixed(3)}`;

/** The results table, the fits and the prescriptions of each grid. */
function report(
  points: ScalingPoint[],
  widths: number[],
  depths: number[],
  tokensPerStep: number,
  rounds: number,
): string {
  const flops = 10 * Math.max(...points.map((p) => 6 * p.n * p.tokens));
  const grids: [string, ScalingPoint[]][] = [['every width × depth', points]];
  const midD = depths[depths.length >> 1], midW = widths[widths.length >> 1];
  grids.push([`depth ${midD} only (widths vary)`, points.filter((p) => p.depth === midD)]);
  grids.push([`width ${midW} only (depths vary)`, points.filter((p) => p.width === midW)]);
  const rows: (string | number)[][] = [];
  for (const [name, pts] of grids) {
    let fit: LawFit;
    try {
      fit = fitParamsLaw(pts);
    } catch (e) {
      rows.push([name, pts.length, (e as Error).message, '', '', '', '', '']);
      continue;
    }
    const err = bootstrap(fitParamsLaw, pts, rounds);
    const opt = computeOptimal(fit, pts, flops);
    rows.push([
      name,
      pts.length,
      pm(fit.params.alpha, err.alpha),
      pm(fit.params.beta, err.beta),
      fit.params.E.toFixed(3),
      fit.rms.toFixed(4),
      opt.exponent.toFixed(3),
      `${(opt.n / 1e3).toFixed(0)}k params · ${opt.tokensPerParam.toFixed(1)} tokens/param`,
    ]);
  }
  const shape = fitShapeLaw(points);
  const shapeErr = bootstrap(fitShapeLaw, points, rounds);
  const sp = shape.params;
  return `## scaling\n\n${points.length} points: widths ${widths.join(', ')} × depths ${depths.join(', ')}, ` +
    `each one run (${tokensPerStep} tokens a step) branched into cooldowns. Fit L(N, D) = E + A·N^−α + B·D^−β, ` +
    `errors from ${rounds} bootstrap resamples; the prescription is the compute-optimal split of C = ${
      flops.toExponential(2)
    } FLOPs (10× the largest run), N_opt ∝ C^(β/(α+β)).\n\n` +
    markdownTable(
      ['grid', 'points', 'α', 'β', 'E', 'RMS residual', 'β/(α+β)', 'prescription at C'],
      rows,
    ) +
    `\nAgainst width, depth and tokens (every point): L = E + A·w^−a + B·d^−b + G·D^−γ with a = ${
      pm(sp.a, shapeErr.a)
    }, b = ${pm(sp.b, shapeErr.b)}, γ = ${pm(sp.gamma, shapeErr.gamma)}, RMS residual ${shape.rms.toFixed(4)}.\n\n` +
    markdownTable(
      ['params', 'width', 'depth', 'tokens', 'val loss'],
      points.map((p) => [p.n, p.width, p.depth, p.tokens, p.loss]),
    ) + `\nPlot: scaling.svg; points: scaling.csv.\n`;
}

function chart(points: ScalingPoint[]): string {
  const keys = [...new Set(points.map((p) => `w${p.width} d${p.depth}`))];
  return lineChart({
    title: 'Val loss after each cooldown, per model',
    xLabel: 'log₂ tokens',
    yLabel: 'val loss (nats/char)',
    series: keys.map((k) => ({
      name: k,
      points: points.filter((p) => `w${p.width} d${p.depth}` === k).map((p) => [Math.log2(p.tokens), p.loss]),
    })),
  });
}

export const scaling: Experiment = {
  name: 'scaling',
  help:
    'scaling     scaling-law sweep: widths × depths, WSD runs branched into cooldowns, laws fitted to all points and to one shape family\n' +
    '            --widths 32,64,96 --depths 1,2,4 --branches 30,60,120,240,480 --head-size 16 --lr 3e-3 --bootstrap 50 (block 64, batch 16)',
  run,
};
