/**
 * `npm run experiment -- compression`: compression-assisted collectives per parallel dimension
 * (MCR-DL, arXiv 2303.08374, and its hybrid study; docs/design.md#compressed-collectives-and-the-per-dimension-policy).
 * The same model, data and seed train on dp 2 × tp 2 × pp 2 three times — uncompressed, naive (one aggressive scheme on
 * every dimension) and hybrid (a scheme per dimension: low-rank on the dp gradients, lighter on the activations) — each
 * as a real parallel run (src/cli/train_parallel.ts, its own folder with metrics, trace and accounting), on a two-level
 * network whose slow inter-node link carries the dp traffic. Reports validation-loss curves, bytes per step by
 * dimension and the simulated communication time per step.
 */
import { formatCompressPolicy, parseCompressPolicy } from '../comm/compression.ts';
import { NetworkModel } from '../comm/network.ts';
import { type Experiment, type ExperimentContext, gpuFlag, intFlag, modelFlags, numFlag, writeOut } from './common.ts';
import { csv, lineChart, markdownTable, type Series } from './report.ts';

const DIMS = ['dp', 'tp', 'pp'] as const;
const WORLD = 8;

/** One configuration's run, read back from its metrics.jsonl. */
interface RunResult {
  name: string;
  policy: string;
  /** [step after which it was taken (1-based), val loss]. */
  val: [number, number][];
  /** Bytes per step and rank by dimension, averaged over the steps. */
  bytes: Record<string, number>;
  /** Mean simulated ms per step (slowest rank). */
  simMs: number;
}

/** Reads a run's metrics.jsonl: validation points, bytes by dimension and simulated time per step. */
async function readRun(name: string, policy: string, dir: string): Promise<RunResult> {
  const lines = (await Deno.readTextFile(`${dir}/metrics.jsonl`)).trim().split('\n').map((l) => JSON.parse(l));
  const steps = lines.filter((l) => l.loss !== undefined), val = lines.filter((l) => l.val_loss !== undefined);
  const bytes: Record<string, number> = {};
  for (const s of steps) {
    for (const [k, b] of Object.entries(s.bytes_by_collective as Record<string, number>)) {
      const dim = k.split('/')[0];
      bytes[dim] = (bytes[dim] ?? 0) + b / (WORLD * steps.length);
    }
  }
  const simMs = steps.reduce((a, s) => a + (s.sim_ms_per_step), 0) / steps.length;
  return { name, policy, val: val.map((v) => [v.step + 1, v.val_loss]), bytes, simMs };
}

async function run(ctx: ExperimentContext): Promise<string> {
  const f = ctx.flags;
  const shape = modelFlags(f, { nLayer: 2, nEmbd: 64, nHead: 4, blockSize: 32, batchSize: 16 });
  const steps = intFlag(f, 'steps', 300), every = intFlag(f, 'eval-interval', 25);
  const lr = numFlag(f, 'lr', 3e-3, 1e-6, 1);
  const net = f.net ?? 'intra=100GB/s,2us;inter=1.25GB/s,20us;node=4';
  NetworkModel.parse(net); // refuse a bad network before the first run
  const configs: [string, string][] = [
    ['uncompressed', 'none'],
    ['naive', `naive:${f.naive ?? 'topk:0.05'}`],
    ['hybrid', f.hybrid ?? 'dp=powersgd:4,tp=int8,pp=int8'],
  ];
  for (const [, p] of configs) parseCompressPolicy(p);
  const results: RunResult[] = [];
  for (const [name, policy] of configs) {
    const dir = `${ctx.out}/${name}`;
    ctx.log(`\n== ${name}: --compress ${policy}`);
    await ctx.trainParallel({
      plan: { dp: 2, tp: 2, pp: 2, microBatches: 2, compress: policy, net },
      config: { steps, evalInterval: every, ...shape, lr, minLr: lr / 10, ckptInterval: steps },
      out: dir,
      gpu: gpuFlag(f),
    });
    results.push(await readRun(name, formatCompressPolicy(parseCompressPolicy(policy)), dir));
  }
  return await report(ctx, results, { steps, net, shape });
}

/** Writes results.md, compression.csv and the plots; returns the markdown. */
async function report(
  ctx: ExperimentContext,
  results: RunResult[],
  o: { steps: number; net: string; shape: ReturnType<typeof modelFlags> },
): Promise<string> {
  const base = results[0], total = (r: RunResult) => DIMS.reduce((a, d) => a + (r.bytes[d] ?? 0), 0);
  const last = (r: RunResult) => r.val[r.val.length - 1][1];
  const kib = (b: number) => (b / 1024).toFixed(1);
  const rows = results.map((r) => [
    r.name,
    r.policy,
    last(r).toFixed(4),
    `${(100 * (last(r) / last(base) - 1)).toFixed(2)}%`,
    ...DIMS.map((d) => kib(r.bytes[d] ?? 0)),
    kib(total(r)),
    `${(total(base) / total(r)).toFixed(2)}×`,
    r.simMs.toFixed(3),
  ]);
  const headers = ['run', '--compress', 'final val loss', 'vs uncompressed', ...DIMS.map((d) => `${d} KiB/step`)]
    .concat(['total KiB/step', 'fewer bytes', 'sim ms/step']);
  const series: Series[] = results.map((r, i) => ({ name: r.name, points: r.val, color: i }));
  await writeOut(
    ctx,
    'compression_val.svg',
    lineChart({ title: 'Validation loss, dp2 × tp2 × pp2', xLabel: 'step', yLabel: 'val loss', series, width: 800 }),
  );
  await writeOut(
    ctx,
    'compression.csv',
    csv(['run', 'step', 'val_loss'], results.flatMap((r) => r.val.map(([s, v]) => [r.name, s, v]))),
  );
  const { shape } = o;
  const md = `## compression\n\ndp 2 × tp 2 × pp 2 (8 ranks), GPT ${shape.nLayer} layers × width ${shape.nEmbd}, ` +
    `${shape.nHead} heads, context ${shape.blockSize}, global batch ${shape.batchSize} in 2 micro-batches, ` +
    `${o.steps} steps, seed ${shape.seed}; network \`${o.net}\` (dp across nodes). Bytes are per rank and step ` +
    `(payload + scales + indices); sim ms is the slowest rank's simulated communication time per step.\n\n` +
    markdownTable(headers, rows) +
    `\nPlot: compression_val.svg; every evaluation: compression.csv; each run's folder holds its metrics, ` +
    `trace and accounting.\n`;
  await writeOut(ctx, 'results.md', md);
  return md;
}

export const compression: Experiment = {
  name: 'compression',
  help:
    'compression uncompressed vs naive (one scheme everywhere) vs hybrid (per dimension) on dp2 × tp2 × pp2: val loss, bytes per step by dimension, simulated step time\n' +
    '            --steps 300 --eval-interval 25 --lr 3e-3 --naive topk:0.05 --hybrid dp=powersgd:4,tp=int8,pp=int8 --net "intra=100GB/s,2us;inter=1.25GB/s,20us;node=4"',
  run,
};
