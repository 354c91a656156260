/**
 * `npm run experiment -- plan-model`: the performance model (src/perf/step_time.ts,
 * docs/design.md#a-performance-model-that-chooses-the-plan) against real runs (issue 15's measured validation). The
 * same small GPT trains a few steps under each of ≥ 20 plans of 8 ranks — dp, tp (+ sp), pp (1F1B, GPipe, interleaved)
 * with several micro-batch counts, cp (ring, Ulysses), ZeRO 1–3, recomputation — each a real parallel run
 * (src/cli/train_parallel.ts) on a two-level network with a modelled peak, whose simulated clock charges every forward
 * and backward the model's own compute time (src/perf/action_prices.ts). So the measured step is the engine's real
 * messages, schedule and waits on the α-β links, and the comparison tests what the model assumes about them: exposed
 * communication, overlap and the bubble. Reports each plan's predicted and measured step, the Spearman rank correlation
 * and where the predicted-best plan lands in the measured order.
 */
import { NetworkModel } from '../comm/network.ts';
import { describePlan, type ParallelPlan } from '../parallel/plan/plan.ts';
import { planFromOptions, type PlanOptions } from '../parallel/plan/plan_schema.ts';
import { flatProfile } from '../perf/device_profile.ts';
import { predictStep } from '../perf/step_time.ts';
import {
  type Experiment,
  type ExperimentContext,
  gpuFlag,
  intFlag,
  modelFlags,
  planFlagText,
  writeOut,
} from './common.ts';
import { csv, lineChart, markdownTable } from './report.ts';

/** The plans (world 8). */
const PLANS: PlanRun[] = [
  { plan: { dp: 8 } },
  { plan: { dp: 8, zero: 1 } },
  { plan: { dp: 8, zero: 2 } },
  { plan: { dp: 8, zero: 3 } },
  { plan: { dp: 4, tp: 2 } },
  { plan: { dp: 4, tp: 2, sp: true } },
  { plan: { dp: 2, tp: 4 } },
  { plan: { dp: 4, pp: 2, microBatches: 2 } },
  { plan: { dp: 4, pp: 2, microBatches: 4 } },
  { plan: { dp: 4, pp: 2, microBatches: 4, ppSchedule: 'gpipe' } },
  { plan: { dp: 2, pp: 4, microBatches: 4 } },
  { plan: { dp: 2, pp: 4, microBatches: 8 } },
  { plan: { dp: 2, tp: 2, pp: 2, microBatches: 2 } },
  { plan: { dp: 2, tp: 2, pp: 2, microBatches: 4 } },
  { plan: { dp: 2, tp: 2, pp: 2, microBatches: 4, ppSchedule: 'interleaved', virtualStages: 2 } },
  { plan: { tp: 2, pp: 4, microBatches: 4 } },
  { plan: { tp: 4, pp: 2, microBatches: 2 } },
  { plan: { dp: 4, cp: 2 } },
  { plan: { dp: 2, cp: 2, tp: 2 } },
  { plan: { dp: 2, cp: 2, tp: 2, cpKind: 'ulysses' } },
  { plan: { dp: 4, tp: 2 }, recompute: 'full' },
  { plan: { dp: 2, tp: 2, pp: 2, microBatches: 2 }, recompute: 'selective' },
];

/** One compared run: its plan's options and the activation recomputation of its config. */
interface PlanRun {
  plan: Partial<PlanOptions>;
  recompute?: 'selective' | 'full';
}

/** The run's `npm run train` flags, as the table shows them. */
const flagsOf = (r: PlanRun) => planFlagText(r.plan) + (r.recompute ? ` --recompute ${r.recompute}` : '');

interface Row {
  flags: string;
  plan: ParallelPlan;
  predictedMs: number;
  measuredMs: number;
}

/** Spearman's ρ of two equally long series (average ranks for ties). */
export function spearman(a: number[], b: number[]): number {
  const rank = (x: number[]) => {
    const order = x.map((v, i) => [v, i] as const).sort((p, q) => p[0] - q[0]), r = new Array<number>(x.length);
    for (let i = 0; i < order.length;) {
      let j = i;
      while (j + 1 < order.length && order[j + 1][0] === order[i][0]) j++;
      for (let k = i; k <= j; k++) r[order[k][1]] = (i + j) / 2;
      i = j + 1;
    }
    return r;
  };
  const [ra, rb] = [rank(a), rank(b)], mean = (a.length - 1) / 2;
  let num = 0, da = 0, db = 0;
  for (let i = 0; i < a.length; i++) {
    num += (ra[i] - mean) * (rb[i] - mean);
    da += (ra[i] - mean) ** 2;
    db += (rb[i] - mean) ** 2;
  }
  return num / Math.sqrt(da * db);
}

async function run(ctx: ExperimentContext): Promise<string> {
  const f = ctx.flags;
  const shape = modelFlags(f, { nLayer: 4, nEmbd: 64, nHead: 4, blockSize: 32, batchSize: 32 });
  const steps = intFlag(f, 'steps', 2), count = intFlag(f, 'plans', PLANS.length);
  const net = f.net ?? 'intra=20GB/s,5us;inter=2GB/s,20us;node=4;peak=5';
  const model = NetworkModel.parse(net), peak = model.spec.peakGflops;
  if (!peak) throw new Error(`--net '${net}' needs ';peak=<GFLOP/s>': the simulated clock must charge compute`);
  const rows: Row[] = [];
  for (const r of PLANS.slice(0, count)) {
    const flags = flagsOf(r), dir = `${ctx.out}/${flags.replaceAll(' ', '').replace(/[^A-Za-z0-9]+/g, '-')}`;
    ctx.log(`\n== ${flags}`);
    await ctx.trainParallel({
      plan: { ...r.plan, net },
      config: {
        steps,
        evalInterval: steps,
        ...shape,
        evalBatches: 1,
        ckptInterval: steps,
        ...(r.recompute ? { recompute: r.recompute } : {}),
      },
      out: dir,
      gpu: gpuFlag(f),
    });
    const lines = (await Deno.readTextFile(`${dir}/metrics.jsonl`)).trim().split('\n').map((l) => JSON.parse(l));
    const sim = lines.filter((l) => l.sim_ms_per_step !== undefined).map((l) => l.sim_ms_per_step as number);
    const config = JSON.parse(await Deno.readTextFile(`${dir}/config.json`));
    const plan = planFromOptions(r.plan, { gradAccum: 1 }, 64);
    const pm = {
      nLayer: shape.nLayer,
      nHead: shape.nHead,
      nEmbd: shape.nEmbd,
      blockSize: shape.blockSize,
      batchSize: shape.batchSize,
      vocabSize: config.vocabSize,
    };
    const o = { dtype: 'f32' as const, recompute: r.recompute ?? ('none' as const), attention: 'flash' as const };
    const p = predictStep(plan, pm, o, flatProfile(peak * 1e9), model, 1);
    rows.push({
      flags,
      plan,
      predictedMs: p.step * 1e3,
      measuredMs: sim.reduce((a, b) => a + b) / sim.length,
    });
  }
  return await report(ctx, rows, { net, shape, steps });
}

async function report(
  ctx: ExperimentContext,
  rows: Row[],
  o: { net: string; shape: ReturnType<typeof modelFlags>; steps: number },
): Promise<string> {
  const rho = spearman(rows.map((r) => r.predictedMs), rows.map((r) => r.measuredMs));
  const best = rows.reduce((b, r) => (r.predictedMs < b.predictedMs ? r : b));
  const measuredOrder = [...rows].sort((a, b) => a.measuredMs - b.measuredMs);
  const bestRank = measuredOrder.indexOf(best) + 1;
  const sorted = [...rows].sort((a, b) => a.predictedMs - b.predictedMs);
  const table = markdownTable(
    ['plan', 'flags', 'predicted ms', 'measured ms', 'measured / predicted', 'measured rank'],
    sorted.map((r) => [
      describePlan(r.plan).replace(/ \(\d+ ranks\)/, ''),
      `\`${r.flags}\``,
      r.predictedMs.toFixed(2),
      r.measuredMs.toFixed(2),
      (r.measuredMs / r.predictedMs).toFixed(3),
      String(measuredOrder.indexOf(r) + 1),
    ]),
  );
  await writeOut(
    ctx,
    'plan_model.svg',
    lineChart({
      title: 'Step time by plan (sorted by prediction)',
      xLabel: 'plan (predicted order)',
      yLabel: 'ms per step',
      series: [
        { name: 'predicted', points: sorted.map((r, i) => [i + 1, r.predictedMs]), color: 0 },
        { name: 'measured (simulated clock)', points: sorted.map((r, i) => [i + 1, r.measuredMs]), color: 1 },
      ],
      width: 800,
    }),
  );
  await writeOut(
    ctx,
    'plan_model.csv',
    csv(['flags', 'predicted_ms', 'measured_ms'], rows.map((r) => [r.flags, r.predictedMs, r.measuredMs])),
  );
  const { shape } = o;
  const md = `## plan-model\n\n${rows.length} plans of 8 ranks, GPT ${shape.nLayer} layers × width ${shape.nEmbd}, ` +
    `${shape.nHead} heads, context ${shape.blockSize}, global batch ${shape.batchSize}, ${o.steps} steps each; network ` +
    `\`${o.net}\`. Measured: the simulated step (slowest rank) of a real run, compute charged per action at the ` +
    `model's own times, messages on the α-β links. Spearman ρ = ${rho.toFixed(3)}; the predicted-best plan ` +
    `(\`${best.flags}\`) is measured #${bestRank} of ${rows.length}.\n\n${table}\n`;
  await writeOut(ctx, 'results.md', md);
  return md;
}

export const planModel: Experiment = {
  name: 'plan-model',
  help:
    'plan-model the performance model against ≥ 20 real 8-rank runs (simulated clock): predicted vs measured step, Spearman ρ, rank of the predicted best\n' +
    '            --steps 2 --plans 22 --net "intra=20GB/s,5us;inter=2GB/s,20us;node=4;peak=5"',
  run,
};
