/**
 * `npm run experiment -- low-comm`: low-communication data parallelism
 * (docs/design.md#low-communication-data-parallelism) on dp 4 across two nodes joined by a slow link, the same model,
 * data, seed and tokens for every method: DDP, local SGD, DiLoCo (H = 10, 50), Streaming DiLoCo (2 fragments,
 * overlapped, int4 outer gradients) and CO2 — each a real parallel run (src/cli/train_parallel.ts, its own folder with
 * metrics, trace and accounting). The network model charges each step's compute at a modelled peak (`;peak=` GFLOP/s),
 * so the simulated clock shows what overlap hides. Reports the final validation loss, bytes exchanged, the busiest
 * step's bytes (peak bandwidth) and the simulated wall time.
 */
import { NetworkModel } from '../comm/network.ts';
import {
  type Experiment,
  type ExperimentContext,
  gpuFlag,
  intFlag,
  modelFlags,
  numFlag,
  planFlagText,
  writeOut,
} from './common.ts';
import { csv, lineChart, markdownTable, type Series } from './report.ts';
import type { PlanOptions } from '../parallel/plan/plan_schema.ts';

const DP = 4;

/** Streaming DiLoCo's flags: F fragments, τ overlapped steps, int4 outer gradients. */
function streaming(fragments: number, overlap: number): Partial<PlanOptions> {
  return { fragments, overlapSteps: overlap, outerQuant: 'int4' };
}

/** One method: its name and its sync options (none: DDP, every step). */
type Method = [string, Partial<PlanOptions>];

/** The methods compared, by their `--methods` key. */
const METHODS: Record<string, Method> = {
  ddp: ['DDP', {}],
  'local-sgd': ['local SGD H=10', { sync: 'local-sgd', innerSteps: 10 }],
  'diloco-10': ['DiLoCo H=10', { sync: 'diloco', innerSteps: 10 }],
  'diloco-50': ['DiLoCo H=50', { sync: 'diloco', innerSteps: 50 }],
  'streaming-10': ['Streaming DiLoCo H=10', { sync: 'streaming-diloco', innerSteps: 10, ...streaming(2, 4) }],
  'streaming-50': ['Streaming DiLoCo H=50', { sync: 'streaming-diloco', innerSteps: 50, ...streaming(2, 20) }],
  co2: ['CO2 H=10', { sync: 'co2', innerSteps: 10, outerClip: 1 }],
};

/** One run, read back from its metrics.jsonl. */
interface RunResult {
  name: string;
  flags: string;
  /** [step after which it was taken (1-based), val loss]. */
  val: [number, number][];
  /** Bytes every rank sent over the run, summed over ranks (payload + scales). */
  bytes: number;
  /** The busiest step's bytes per rank. */
  peakBytes: number;
  /** Simulated wall time of the run (Σ over steps of the slowest rank's simulated step), s. */
  simS: number;
}

async function readRun(name: string, flags: string, dir: string): Promise<RunResult> {
  const lines = (await Deno.readTextFile(`${dir}/metrics.jsonl`)).trim().split('\n').map((l) => JSON.parse(l));
  const steps = lines.filter((l) => l.loss !== undefined), val = lines.filter((l) => l.val_loss !== undefined);
  const perStep = steps.map((s) =>
    Object.values(s.bytes_by_collective as Record<string, number>).reduce((a, b) => a + b, 0)
  );
  return {
    name,
    flags,
    val: val.map((v) => [v.step + 1, v.val_loss]),
    bytes: perStep.reduce((a, b) => a + b, 0),
    peakBytes: Math.max(...perStep) / DP,
    simS: steps.reduce((a, s) => a + s.sim_ms_per_step, 0) / 1e3,
  };
}

async function run(ctx: ExperimentContext): Promise<string> {
  const f = ctx.flags;
  const shape = modelFlags(f, { nLayer: 4, nEmbd: 64, nHead: 4, blockSize: 32, batchSize: 32 });
  const steps = intFlag(f, 'steps', 300), every = intFlag(f, 'eval-interval', 50);
  const lr = numFlag(f, 'lr', 3e-3, 1e-6, 1);
  const net = f.net ?? 'intra=100GB/s,2us;inter=0.1GB/s,100us;node=2;peak=20';
  NetworkModel.parse(net); // refuse a bad network before the first run
  const keys = (f.methods ?? Object.keys(METHODS).join(',')).split(',').map((k) => k.trim());
  const unknown = keys.filter((k) => !(k in METHODS));
  if (unknown.length) {
    throw new Error(`--methods: unknown '${unknown.join("', '")}'; allowed: ${Object.keys(METHODS).join(', ')}`);
  }
  const methods = keys.map((k) => METHODS[k]);
  const results: RunResult[] = [];
  for (const [name, sync] of methods) {
    const dir = `${ctx.out}/${name.replace(/[^A-Za-z0-9]+/g, '-').toLowerCase()}`, flags = planFlagText(sync);
    ctx.log(`\n== ${name}: ${flags || '(every step)'}`);
    await ctx.trainParallel({
      plan: { dp: DP, ...sync, net },
      config: { steps, evalInterval: every, ...shape, lr, minLr: lr / 10, ckptInterval: steps },
      out: dir,
      gpu: gpuFlag(f),
    });
    results.push(await readRun(name, flags || '--sync ddp', dir));
  }
  return await report(ctx, results, { steps, net, shape });
}

async function report(
  ctx: ExperimentContext,
  results: RunResult[],
  o: { steps: number; net: string; shape: ReturnType<typeof modelFlags> },
): Promise<string> {
  const base = results[0], last = (r: RunResult) => r.val[r.val.length - 1][1];
  const mib = (b: number) => (b / 2 ** 20).toFixed(2), kib = (b: number) => (b / 1024).toFixed(1);
  const rows = results.map((r) => [
    r.name,
    `\`${r.flags}\``,
    last(r).toFixed(4),
    `${last(r) >= last(base) ? '+' : ''}${(100 * (last(r) / last(base) - 1)).toFixed(2)}%`,
    mib(r.bytes),
    `${(base.bytes / r.bytes).toFixed(1)}×`,
    kib(r.peakBytes),
    r.simS.toFixed(2),
  ]);
  const headers = ['method', 'flags', 'final val loss', 'vs DDP', 'MiB exchanged', 'fewer bytes', 'peak KiB/step/rank']
    .concat(['sim s']);
  const series: Series[] = results.map((r, i) => ({ name: r.name, points: r.val, color: i }));
  await writeOut(
    ctx,
    'low_comm_val.svg',
    lineChart({
      title: `Validation loss, dp ${DP} over two nodes`,
      xLabel: 'step',
      yLabel: 'val loss',
      series,
      width: 800,
    }),
  );
  await writeOut(
    ctx,
    'low_comm.csv',
    csv(['method', 'step', 'val_loss'], results.flatMap((r) => r.val.map(([s, v]) => [r.name, s, v]))),
  );
  const { shape } = o;
  const md = `## low-comm\n\ndp ${DP} (two nodes of 2 ranks), GPT ${shape.nLayer} layers × width ${shape.nEmbd}, ` +
    `${shape.nHead} heads, context ${shape.blockSize}, global batch ${shape.batchSize}, ${o.steps} steps ` +
    `(the same tokens for every method), seed ${shape.seed}; network \`${o.net}\`. Bytes are summed over ranks ` +
    `and steps (payload + scales); peak is the busiest step's bytes per rank; sim s is the simulated wall time ` +
    `(compute at the modelled peak + messages on the α-β links, overlap counted).\n\n` +
    markdownTable(headers, rows) +
    `\nPlot: low_comm_val.svg; every evaluation: low_comm.csv; each run's folder holds its metrics, trace and accounting.\n`;
  await writeOut(ctx, 'results.md', md);
  return md;
}

export const lowComm: Experiment = {
  name: 'low-comm',
  help:
    'low-comm   DDP vs local SGD, DiLoCo (H 10, 50), Streaming DiLoCo (int4, overlapped) and CO2 on dp 4 over a slow link: val loss, bytes, peak, simulated time\n' +
    '            --steps 300 --eval-interval 50 --lr 3e-3 --net "intra=100GB/s,2us;inter=0.1GB/s,100us;node=2;peak=20"\n' +
    '            --methods ddp,local-sgd,diloco-10,diloco-50,streaming-10,streaming-50,co2',
  run,
};
