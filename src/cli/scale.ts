/**
 * `npm run scale -- [--quick] [--gpu=auto|wgpu|dawn] [--device h100-sxm | --peak-tflops X]
 * [--batch B] [--baseline torch.json] [--json FILE]`: the scale suite (src/bench/scale.ts) on one
 * adapter, printed as tables and written as JSON. With `--baseline`, the PyTorch figures
 * scripts/torch_baseline.py measured on the same GPU stand beside ours as ratios.
 */
import { parseCliArgs } from '../util/parse_cli.ts';
import { Gpu, type SubgroupChoice } from '../gpu/context.ts';
import { parseSubgroupsFlag } from '../gpu/subgroups.ts';
import type { Backend } from '../gpu/device.ts';
import { runScale, type ScaleResult, scaleShapes } from '../bench/scale.ts';
import { DEVICE_PEAKS, peakTflops } from '../perf/devices.ts';
import {
  attentionBaselineCells,
  matmulBaselineCells,
  parseTorchBaseline,
  type TorchBaseline,
  trainBaselineRows,
} from '../bench/baseline.ts';
import { fmt, table } from '../bench/table.ts';
import type { KernelTime } from '../gpu/profiler.ts';
import { exitProcess } from './exit.ts';

const HELP = `Usage: npm run scale -- [options]

Measures f32 matmul GFLOP/s to 8192³, FlashAttention-2 forward+backward to T = 16384 at head
sizes 64 and 128, and a GPT-2-124M-shaped training step (tokens/s, MFU, peak pool bytes).

Options:
  --quick               small shapes (CPU adapters, CI)
  --gpu=auto|wgpu|dawn  WebGPU implementation (default auto)
  --adapter NAME|N      the adapter whose name contains NAME, or the N-th Dawn finds (Dawn)
  --subgroups on|off    subgroup kernel variants where the adapter has them (default off: slower on the GPU measured)
  --device NAME         peak for MFU from a profile: ${Object.keys(DEVICE_PEAKS).join(', ')}
  --peak-tflops X       peak for MFU in TFLOP/s (overrides --device)
  --batch B             sequences per training step (default 4; quick 2)
  --baseline FILE       PyTorch figures from scripts/torch_baseline.py, printed as ratios
  --json FILE           also write the results as JSON
  -h, --help            this text`;

/** The parsed command line. */
export interface ScaleArgs {
  quick: boolean;
  backend: Backend;
  /** Dawn's adapter by name substring or index (src/gpu/dawn_adapters.ts). */
  adapter?: string;
  /** `--subgroups`: the kernels' subgroup variants (src/gpu/context.ts). */
  subgroups: SubgroupChoice;
  peakTflops: number;
  batch?: number;
  baseline?: string;
  json?: string;
  help: boolean;
}

/**
 * Parses `argv` (strict: an unknown flag is an error).
 * @throws Error naming the flag and what is allowed.
 */
export function parseScaleArgs(argv: string[]): ScaleArgs {
  let v;
  try {
    v = parseCliArgs({
      args: argv,
      options: {
        quick: { type: 'boolean', default: false },
        gpu: { type: 'string', default: 'auto' },
        adapter: { type: 'string' },
        subgroups: { type: 'string', default: 'off' },
        device: { type: 'string' },
        'peak-tflops': { type: 'string' },
        batch: { type: 'string' },
        baseline: { type: 'string' },
        json: { type: 'string' },
        help: { type: 'boolean', short: 'h', default: false },
      },
      strict: true,
    }).values;
  } catch (e) {
    throw new Error(`${(e as Error).message.split('\n')[0]} (see --help)`);
  }
  const subgroups = parseSubgroupsFlag(v.subgroups) ?? 'off';
  if (!['auto', 'wgpu', 'dawn'].includes(v.gpu)) throw new Error(`--gpu must be auto, wgpu or dawn, got '${v.gpu}'`);
  const peak = v['peak-tflops'] === undefined ? undefined : Number(v['peak-tflops']);
  if (peak !== undefined && !(peak > 0)) {
    throw new Error(`--peak-tflops must be a number > 0, got '${v['peak-tflops']}'`);
  }
  const batch = v.batch === undefined ? undefined : Number(v.batch);
  if (batch !== undefined && !(Number.isInteger(batch) && batch >= 1)) {
    throw new Error(`--batch must be an integer ≥ 1, got '${v.batch}'`);
  }
  return {
    quick: v.quick,
    backend: v.gpu as Backend,
    adapter: v.adapter,
    subgroups,
    peakTflops: peakTflops(peak, v.device),
    batch,
    baseline: v.baseline,
    json: v.json,
    help: v.help,
  };
}

const mib = (b: number | null) => (b === null ? '–' : (b / 2 ** 20).toFixed(0));
const cell = (x: number | null) => (x === null ? '–' : fmt(x));

/**
 * The parts of `r` that are present as text tables; PyTorch columns appear when `base` is given.
 * The step's variants are compared with `shipped`, the f32 step (`r.train` unless given).
 */
export function scaleTables(r: Partial<ScaleResult>, base?: TorchBaseline, shipped = r.train): string {
  const out: string[] = [];
  if (r.matmul) {
    const torch = base ? ['PyTorch f32 GFLOP/s', 'PyTorch f16 GFLOP/s', 'ours/PyTorch f32'] : [];
    out.push(table(
      [
        'matmul f32 M=N=K',
        'ms',
        'GFLOP/s',
        '64² tile',
        '128² tile',
        'plain 16²',
        'f16 operands',
        'subgroups',
        'no subgroups',
        ...torch,
      ],
      r.matmul.map((m) => [
        String(m.n),
        fmt(m.ms),
        fmt(m.gflops),
        fmt(m.tile64Gflops),
        fmt(m.tile128Gflops),
        fmt(m.plainGflops),
        cell(m.f16Gflops ?? null),
        cell(m.subgroupGflops ?? null),
        cell(m.noSubgroupGflops ?? null),
        ...(base ? matmulBaselineCells(m, base) : []),
      ]),
    ));
  }
  if (r.attention) {
    const torch = base ? ['PyTorch f32 ms', 'PyTorch f16 ms', 'ours/PyTorch f32 speed'] : [];
    out.push(table(
      [
        'flash attn f32 fwd+bwd T',
        'hs',
        'heads',
        'ms',
        'TFLOP/s',
        'peak MiB',
        'kernels',
        'f16 qkv ms',
        'subgroups ms',
        'no subgroups ms',
        ...torch,
      ],
      r.attention.map((a) => [
        String(a.t),
        String(a.hs),
        String(a.nh),
        cell(a.ms),
        cell(a.tflops),
        mib(a.peakBytes),
        a.note ?? a.variant ?? '',
        cell(a.f16Ms ?? null),
        cell(a.subgroupMs ?? null),
        cell(a.noSubgroupMs ?? null),
        ...(base ? attentionBaselineCells(a, base) : []),
      ]),
    ));
  }
  if (r.train) {
    const t = r.train;
    const mfu = t.mfu > 0 ? ` · MFU ${(100 * t.mfu).toFixed(1)}%` : '';
    out.push(
      `training step ${t.name}: ${(t.params / 1e6).toFixed(1)}M params · ${t.tokensPerStep} tokens/step${mfu}\n` +
        table(
          ['run', 'tokens/s', 'ms/step', 'peak MiB', 'ours/theirs'],
          [
            ['ours f32', fmt(t.tokensPerSec), fmt(t.msPerStep), mib(t.peakBytes), '1×'],
            ...(base ? trainBaselineRows(t, base) : []),
          ],
        ),
    );
    if (t.kernels.length) out.push(kernelTable(t.kernels));
  }
  if (r.trainVariants?.length) {
    out.push(table(
      ['variant of the step', 'tokens/s', 'ms/step', 'MFU', 'peak MiB', 'over the shipped f32 step'],
      r.trainVariants.map((v) => [
        `ours, ${v.variant}`,
        fmt(v.tokensPerSec),
        fmt(v.msPerStep),
        v.mfu > 0 ? `${(100 * v.mfu).toFixed(1)}%` : '–',
        mib(v.peakBytes),
        shipped ? `${fmt(v.tokensPerSec / shipped.tokensPerSec)}×` : '–',
      ]),
    ));
    for (const v of r.trainVariants.filter((v) => v.kernels.length)) {
      out.push(`${v.variant}:\n${kernelTable(v.kernels)}`);
    }
  }
  return out.join('\n\n');
}

/** The kernels of one profiled step, slowest first: the top 12 and the rest summed. */
function kernelTable(kernels: KernelTime[]): string {
  const total = kernels.reduce((s, k) => s + k.ms, 0);
  const top = kernels.slice(0, 12);
  const rest = kernels.slice(12);
  const rows = top.map((k) => [k.key, String(k.count), fmt(k.ms), `${(100 * k.ms / total).toFixed(1)}%`]);
  if (rest.length) {
    const ms = rest.reduce((s, k) => s + k.ms, 0);
    rows.push([
      `${rest.length} others`,
      String(rest.reduce((s, k) => s + k.count, 0)),
      fmt(ms),
      `${(100 * ms / total).toFixed(1)}%`,
    ]);
  }
  rows.push(['GPU total', String(kernels.reduce((s, k) => s + k.count, 0)), fmt(total), '100%']);
  return table(['kernel (one profiled step)', 'dispatches', 'GPU ms', 'share'], rows);
}

async function main(argv: string[]): Promise<number> {
  let args: ScaleArgs;
  let base: TorchBaseline | undefined;
  try {
    args = parseScaleArgs(argv);
    if (args.baseline) base = parseTorchBaseline(await Deno.readTextFile(args.baseline), args.baseline);
  } catch (e) {
    console.error(`scale: ${(e as Error).message}`);
    return 2;
  }
  if (args.help) {
    console.log(HELP);
    return 0;
  }
  const gpu = await Gpu.create({
    backend: args.backend,
    adapter: args.adapter,
    subgroups: args.subgroups,
    log: console.log,
  });
  const head = {
    backend: gpu.backend,
    adapter: gpu.adapterDescription,
    features: [...gpu.features],
    subgroups: gpu.subgroups,
    date: new Date().toISOString(),
    quick: args.quick,
    peakTflops: args.peakTflops,
  };
  let done: Partial<ScaleResult> = {};
  /** Prints each part's table as it finishes and rewrites the JSON with everything so far. */
  const onPart = async (part: Partial<ScaleResult>) => {
    done = { ...done, ...part };
    console.log('\n' + scaleTables(part, base, done.train) + '\n');
    if (args.json) await Deno.writeTextFile(args.json, JSON.stringify({ ...head, ...done }, null, 2) + '\n');
  };
  try {
    await runScale(gpu, scaleShapes(gpu, args.quick, args.batch), args.peakTflops, console.log, onPart);
  } finally {
    gpu.destroy();
  }
  return 0;
}

if (import.meta.main) {
  main(Deno.args).then(
    (code) => exitProcess(code),
    (e) => {
      console.error(`scale: ${(e as Error).message}`);
      exitProcess(1);
    },
  );
}
