/**
 * How a recurrent-depth model's r is chosen (src/models/recurrence.ts, docs/design.md#recurrent-depth): the
 * training draw (deterministic, mean recurIters), the trainer running each step at its draw, the
 * evaluation forward at `--eval-iterations` (against the f64 reference), training that learns,
 * the config and plan rules that refuse what is not built, and the CLI: r in metrics.jsonl, a
 * dp 2 × pp 2 run with the single-rank run's losses, and a resumed run with the uninterrupted one's.
 */
import { deepStrictEqual, equal, ok, rejects, throws } from 'node:assert/strict';
import { gpuTest } from '../util/gpu.ts';
import { assertClose } from '../util/assert.ts';
import { trainIterations, withTrainDepth } from '../../src/models/recurrence.ts';
import { createModel, recurrentDepthShape } from '../../src/models/registry.ts';
import type { RecurrentDepth } from '../../src/models/recurrent_depth.ts';
import { recurrentDepthLossAndGradsRef } from '../../src/reference/recurrent_depth.ts';
import { parseConfig, type TrainConfig } from '../../src/train/config.ts';
import { parseTrainArgs } from '../../src/cli/args.ts';
import { runCli, TINY_RUN } from '../util/cli.ts';
import { Trainer } from '../../src/train/trainer.ts';
import { EVAL_STEP } from '../../src/train/evaluate.ts';
import { CharTokenizer } from '../../src/data/tokenizer.ts';
import { TextDataset } from '../../src/data/dataset.ts';
import { checkArchSplit, strategyOf } from '../../src/parallel/plan/strategy.ts';
import { makePlan } from '../../src/parallel/plan/plan.ts';
import { planModelOf } from '../../src/parallel/run/run.ts';

const text = await Deno.readTextFile(new URL('../../public/data/tinyshakespeare.txt', import.meta.url));
const small: Partial<TrainConfig> = {
  arch: 'recurrent-depth',
  nLayer: 3,
  nHead: 2,
  nEmbd: 16,
  blockSize: 16,
  batchSize: 4,
  evalBatches: 1,
};

Deno.test('the training r: deterministic per (seed, step), mean recurIters, at least 1, capped at 4·r̄', () => {
  const cfg = { recurIters: 4, recurSigma: 0.5, seed: 7 };
  const draws = Array.from({ length: 4000 }, (_, s) => trainIterations(cfg, s));
  deepStrictEqual(draws.slice(0, 50), Array.from({ length: 50 }, (_, s) => trainIterations(cfg, s)), 'replayable');
  const mean = draws.reduce((a, x) => a + x, 0) / draws.length;
  ok(Math.abs(mean - 4) < 0.12, `mean r ${mean} ≈ recurIters 4`);
  ok(draws.every((r) => Number.isInteger(r) && r >= 1 && r <= 16), 'integers in [1, 16]');
  ok(new Set(draws).size >= 6, `r varies between steps (${[...new Set(draws)].sort((a, b) => a - b)})`);
  const other = Array.from({ length: 50 }, (_, s) => trainIterations({ ...cfg, seed: 8 }, s));
  ok(other.some((r, s) => r !== draws[s]), 'another seed draws another sequence');
  ok(Array.from({ length: 100 }, (_, s) => trainIterations({ ...cfg, recurIters: 1 }, s)).every((r) => r === 1));
});

Deno.test('withTrainDepth runs a step at its draw and restores the evaluation r, also when the step throws', async () => {
  const model = { iterations: 6, evalIterations: 6 }, cfg = { recurIters: 3, recurSigma: 0.5, seed: 1 };
  const { out, iterations } = await withTrainDepth(model, cfg, 5, () => Promise.resolve(model.iterations));
  equal(out, trainIterations(cfg, 5));
  equal(iterations, out);
  equal(model.iterations, 6);
  await rejects(withTrainDepth(model, cfg, 9, () => Promise.reject(new Error('boom'))), /boom/);
  equal(model.iterations, 6);
  equal((await withTrainDepth({}, cfg, 5, () => Promise.resolve(1))).iterations, null, 'a fixed-depth model');
});

gpuTest('the Trainer runs every micro-batch of step s at trainIterations(cfg, s), and loss falls', async (gpu) => {
  const cfg = parseConfig({ ...small, recurIters: 3, gradAccum: 2, steps: 40, warmup: 4, lr: 1e-2, logInterval: 40 });
  const tok = CharTokenizer.fromText(text), data = new TextDataset(tok.encode(text), cfg.blockSize);
  const model = createModel(gpu, cfg, tok.vocabSize) as RecurrentDepth;
  const trainer = new Trainer(gpu, model, data, cfg), seen: number[][] = [];
  trainer.onBatch = (step) => (seen[step] ??= []).push(model.iterations);
  for (let s = 0; s < cfg.steps; s++) await trainer.step(s);
  const recs = await trainer.drain();
  deepStrictEqual(seen, seen.map((_, s) => [trainIterations(cfg, s), trainIterations(cfg, s)]));
  ok(new Set(seen.flat()).size > 1, 'r varies');
  equal(model.iterations, 3, 'evaluation r after training');
  const first = recs.slice(0, 5).reduce((a, x) => a + x.loss, 0) / 5,
    last = recs.slice(-5).reduce((a, x) => a + x.loss, 0) / 5;
  ok(last < first - 0.4, `loss falls: ${first.toFixed(3)} → ${last.toFixed(3)}`);
  model.params.destroy();
});

gpuTest(
  '--eval-iterations sets the r of the evaluation forward (val loss = the f64 reference at that r)',
  async (gpu) => {
    const args = parseTrainArgs(['--arch', 'recurrent-depth', '--eval-iterations', '5', '--n-layer', '3']);
    equal(args.overrides.evalIterations, 5);
    const tok = CharTokenizer.fromText(text);
    const losses: number[] = [];
    for (const r of [5, 1]) {
      const cfg = parseConfig({ ...small, recurIters: 2, evalIterations: r });
      const data = new TextDataset(tok.encode(text), cfg.blockSize);
      const model = createModel(gpu, cfg, tok.vocabSize) as RecurrentDepth;
      equal(model.iterations, r);
      const flat = await gpu.read(model.params.values);
      const params = new Map(
        model.params.params.map((p) => [p.name, Float64Array.from(flat.subarray(p.offset, p.offset + p.size))]),
      );
      const { x, y } = data.batch('val', cfg.batchSize, cfg.blockSize, cfg.seed, EVAL_STEP, 0);
      const shape = recurrentDepthShape(cfg, tok.vocabSize);
      const ref = recurrentDepthLossAndGradsRef(shape, params, x, y, cfg.batchSize, cfg.blockSize, r).loss;
      const got = await new Trainer(gpu, model, data, cfg).evaluate('val');
      assertClose([got], [ref], `val loss at r = ${r}`);
      losses.push(got);
      model.params.destroy();
    }
    ok(Math.abs(losses[0] - losses[1]) > 1e-4, `r = 5 and r = 1 give different losses (${losses})`);
    const byDefault = createModel(gpu, parseConfig({ ...small, recurIters: 6 }), 11) as RecurrentDepth;
    equal(byDefault.iterations, 6, '--eval-iterations 0 means recurIters');
    byDefault.params.destroy();
  },
);

Deno.test('recurrent-depth config and plan rules: a core block is required; every dense split runs; ep and a pipeline split of the wrong count are refused by name', () => {
  throws(
    () => parseConfig({ arch: 'recurrent-depth', nLayer: 2, preludeLayers: 1, codaLayers: 1 }),
    /--arch recurrent-depth needs at least one core block: nLayer \(2\) .* give --n-layer 3 or more/,
  );
  throws(() => parseConfig({ arch: 'recurrent-depth', nLayer: 3, recurIters: 0 }), /recurIters/);
  parseConfig({ arch: 'gpt', nLayer: 2 }); // the rule binds recurrent-depth only
  checkArchSplit(makePlan({ dp: 2 }), 'recurrent-depth');
  checkArchSplit(makePlan({ dp: 2, zero: 1 }), 'recurrent-depth');
  checkArchSplit(makePlan({ dp: 2, pp: 2 }), 'recurrent-depth');
  checkArchSplit(makePlan({ tp: 2, sp: true }), 'recurrent-depth');
  checkArchSplit(makePlan({ cp: 2 }), 'recurrent-depth');
  checkArchSplit(makePlan({ dp: 2, zero: 3 }), 'recurrent-depth');
  throws(
    () => strategyOf(makePlan({ dp: 2, ep: 2 }), 'recurrent-depth'),
    /ep 2 needs --arch gpt-moe or mamba-moe, got recurrent-depth/,
  );
  // The plan CLI and the parallel trainer build the plan model first: it states these rules in the arch's terms.
  const rd = parseConfig({ arch: 'recurrent-depth', nLayer: 4 });
  throws(
    () => planModelOf(makePlan({ pp: 2 }), rd, 11),
    /pieces, .* = 1 \+ 1 \+ 1 = 3, not nLayer; 3 is not divisible/,
  );
  equal(planModelOf(makePlan({ pp: 2 }), { ...rd, codaLayers: 2 }, 11).nLayer, 4, 'P + 1 + Q pieces');
});

Deno.test({
  name:
    "npm run train -- --arch recurrent-depth records each step's r in metrics.jsonl; dp 2 × pp 2 gives the same losses",
  sanitizeResources: false,
  fn: async () => {
    // Prelude 1, core 1, coda 2: four pieces, two per stage (prelude, core | coda, coda).
    const args = [...TINY_RUN, '--arch', 'recurrent-depth', '--n-layer', '4', '--coda-layers', '2', '--steps', '4'];
    const run = async (extra: string[]) => {
      const dir = await Deno.makeTempDir();
      const r = await runCli('train.ts', [...args, '--seed', '5', '--recur-iters', '3', ...extra, '--out', dir]);
      equal(r.code, 0, r.stderr);
      const rows = (await Deno.readTextFile(`${dir}/metrics.jsonl`)).trim().split('\n').map((l) => JSON.parse(l));
      return rows.filter((x) => x.loss !== undefined);
    };
    // The plain single-rank run of the split run's global batch (4 rows × 2 micro-batches): one batch of 8.
    const single = await run(['--batch-size', '8']), split = await run(['--grad-accum', '2', '--dp', '2', '--pp', '2']);
    const cfg = { recurIters: 3, recurSigma: 0.5, seed: 5 }, want = [0, 1, 2, 3].map((s) => trainIterations(cfg, s));
    deepStrictEqual(single.map((x) => x.iterations), want);
    deepStrictEqual(split.map((x) => x.iterations), want);
    equal(split[0].sent_by_rank.length, 4, 'the split run ran on 4 ranks');
    const moved = split[0].elements_by_collective;
    ok(
      moved['pp/send'] > 0 && moved['dp/allReduce'] > 0,
      `activations between stages, gradients over dp: ${JSON.stringify(moved)}`,
    );
    for (const [s, x] of split.entries()) {
      ok(Math.abs(x.loss - single[s].loss) < 1e-4 * single[s].loss, `step ${s}: ${x.loss} vs ${single[s].loss}`);
    }
  },
});

Deno.test({
  name: 'recurrent-depth: a run stopped at a checkpoint and resumed draws the same r and reproduces the losses',
  sanitizeResources: false,
  fn: async () => {
    // A constant LR, so the 3-step run's schedule is the 6-step run's: only the resume differs.
    const args = [
      ...TINY_RUN,
      '--arch',
      'recurrent-depth',
      '--n-layer',
      '3',
      '--recur-iters',
      '3',
      '--recur-backprop',
      '2',
    ];
    const flat = [...args, '--schedule', 'constant', '--cooldown-frac', '0', '--warmup', '0', '--ckpt-interval', '3'];
    const losses = async (dir: string) =>
      (await Deno.readTextFile(`${dir}/metrics.jsonl`)).trim().split('\n').map((l) => JSON.parse(l)).filter((x) =>
        x.loss !== undefined
      );
    const whole = await Deno.makeTempDir(), part = await Deno.makeTempDir();
    equal((await runCli('train.ts', [...flat, '--steps', '6', '--out', whole])).code, 0);
    equal((await runCli('train.ts', [...flat, '--steps', '3', '--out', part])).code, 0);
    const resumed = await runCli('train.ts', ['--resume', '--out', part, '--steps', '6']);
    equal(resumed.code, 0, resumed.stderr);
    const [a, b] = [await losses(whole), await losses(part)];
    deepStrictEqual(b.map((x) => x.step), [0, 1, 2, 3, 4, 5]);
    deepStrictEqual(b.map((x) => x.iterations), a.map((x) => x.iterations));
    for (const [s, x] of b.entries()) {
      ok(Math.abs(x.loss - a[s].loss) <= 1e-5 * a[s].loss, `step ${s}: ${x.loss} vs ${a[s].loss}`);
    }
  },
});
