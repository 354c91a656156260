/**
 * `npm run bench -- [suite] [--gpu=auto|wgpu|dawn] [--json FILE] [--sizes 128,256]`:
 * benchmarks on WebGPU (Deno's wgpu or Dawn). Prints a text table per suite, then all results
 * as JSON on stdout (and to FILE with --json). Suites live in {@link SUITES}; `all` (the
 * default) runs every one in order.
 *
 * Flags are parsed by node:util's parseArgs in strict mode (as `npm run train` does): an
 * unknown flag is an error, not a silent no-op.
 */
import { parseArgs } from 'node:util';
import { Gpu, type SubgroupChoice } from '../gpu/context.ts';
import { parseSubgroupsFlag } from '../gpu/subgroups.ts';
import type { Backend } from '../gpu/device.ts';
import { benchBiasEpilogue, benchMatmul, benchMatmulShapes } from '../bench/matmul.ts';
import { benchTrain } from '../bench/train.ts';
import { commMain } from '../bench/comm.ts';
import { decodeMain } from '../bench/decode_cli.ts';
import { attentionTable, benchAttention, parseAttentionFlag } from '../bench/attention.ts';
import { benchScan } from '../bench/scan.ts';
import { exitProcess } from './exit.ts';
import { fmt, table } from '../bench/table.ts';

/** What a suite gets: the device and the parsed common options. */
export interface SuiteContext {
  gpu: Gpu;
  /** Square sizes for size-swept suites (--sizes). */
  sizes?: number[];
  /** The attention suite's shape (--attn b=1,nh=4,hs=64,causal=1,reps=3,tiled=0). */
  attn?: string;
  log: (line: string) => void;
}

/** A named benchmark: prints its own table through `log`, returns its JSON-able results. */
export interface Suite {
  description: string;
  run(ctx: SuiteContext): Promise<unknown>;
}

const DEFAULT_MATMUL_SIZES = [128, 256, 512, 1024];

/** Every suite `npm run bench` knows, in the order `all` runs them. */
export const SUITES: Record<string, Suite> = {
  matmul: {
    description: 'shipped matmul vs the plain 16×16 tile kernel at 128³…1024³, then training shapes',
    async run({ gpu, sizes, log }) {
      const rows = await benchMatmul(gpu, sizes ?? DEFAULT_MATMUL_SIZES);
      log(table(
        ['M×N×K', 'shipped ms', 'shipped GFLOP/s', 'plain ms', 'plain GFLOP/s', 'ratio'],
        rows.filter((r) => r.kernel === 'shipped').map((s) => {
          const p = rows.find((r) => r.kernel === 'plain' && r.m === s.m && r.n === s.n && r.k === s.k)!;
          return [`${s.m}×${s.n}×${s.k}`, fmt(s.ms), fmt(s.gflops), fmt(p.ms), fmt(p.gflops), `${s.ratio.toFixed(1)}×`];
        }),
      ));
      const shapes = await benchMatmulShapes(gpu);
      log('');
      log(table(
        ['training shape', 'M×N×K', 'layout', 'ms', 'GFLOP/s'],
        shapes.map((r) => [r.name, `${r.m}×${r.n}×${r.k}`, r.layout, fmt(r.ms), fmt(r.gflops)]),
      ));
      const bias = await benchBiasEpilogue(gpu);
      log('');
      log(table(
        ['y = x·Wᵀ + b', 'M×N×K', 'fused ms', 'matmul + bias pass ms', 'unfused / fused'],
        bias.map((r) => [r.name, `${r.m}×${r.n}×${r.k}`, fmt(r.fusedMs), fmt(r.unfusedMs), `${r.ratio.toFixed(2)}×`]),
      ));
      return { squares: rows, training: shapes, biasEpilogue: bias };
    },
  },
  train: {
    description:
      'ms/step and tokens/s of training steps of the tiny and nanogpt-cpu presets on Tiny Shakespeare; the bias add fused into the matmul vs a separate pass, alternating in the same run',
    async run({ gpu, log }) {
      const text = await Deno.readTextFile(new URL('../../public/data/tinyshakespeare.txt', import.meta.url));
      const rows = [await benchTrain(gpu, text, 'tiny', 20, 3), await benchTrain(gpu, text, 'nanogpt-cpu', 10, 3)];
      log(table(
        [
          'preset',
          'params',
          'tokens/step',
          'ms/step',
          'unfused-bias ms/step',
          'fused speedup',
          'tokens/s',
          'model GFLOP/s',
        ],
        rows.map((
          r,
        ) => [
          r.preset,
          String(r.params),
          String(r.tokensPerStep),
          fmt(r.msPerStep),
          r.unfusedMsPerStep ? fmt(r.unfusedMsPerStep) : '-',
          r.fusedSpeedup ? `${r.fusedSpeedup.toFixed(2)}×` : '-',
          fmt(r.tokensPerSec),
          fmt(r.gflops),
        ]),
      ));
      for (const r of rows.filter((x) => x.kernels.length)) {
        const total = r.kernels.reduce((a, k) => a + k.ms, 0);
        log(`\nGPU time of one ${r.preset} step by kernel (timestamp queries; ${fmt(total)} ms in all):`);
        log(table(
          ['kernel', 'dispatches', 'ms', 'share'],
          r.kernels.slice(0, 12).map((
            k,
          ) => [k.key, String(k.count), fmt(k.ms), `${((100 * k.ms) / total).toFixed(1)}%`]),
        ));
      }
      return rows;
    },
  },
  attention: {
    description:
      'forward+backward of naive vs flash attention, T = 128…2048 (…8192 on GPUs): median ms and peak pool bytes',
    async run({ gpu, sizes, attn, log }) {
      const opts = { sizes, ...parseAttentionFlag(attn ?? '') };
      const rows = await benchAttention(gpu, opts);
      const { header, cells, verdict } = attentionTable(rows);
      log(`B=${opts.b ?? 1} nh=${opts.nh ?? 4} hs=${opts.hs ?? 64} causal=${opts.causal ?? true}`);
      log(table(header, cells));
      log(verdict);
      return rows;
    },
  },
  scan: {
    description: 'forward+backward of chunked vs sequential linear attention and of the selective scan, T = 256…4096',
    async run({ gpu, sizes, log }) {
      const rows = await benchScan(gpu, sizes ?? [256, 512, 1024, 2048, 4096]);
      log('linear attention: B=1, 4 heads of 64; selective scan: B=1, D=256, N=16');
      log(table(
        ['T', 'chunked ms', 'sequential ms', 'sequential/chunked', 'scan ms', 'scan tokens/s'],
        rows.map((
          r,
        ) => [
          String(r.t),
          fmt(r.chunkedMs),
          fmt(r.sequentialMs),
          `${r.ratio.toFixed(2)}×`,
          fmt(r.scanMs),
          fmt(r.scanTokensPerSec),
        ]),
      ));
      return rows;
    },
  },
};

const HELP = `Usage: npm run bench -- [suite] [options]

Suites: comm (collective layer; see 'comm --help'), decode (tree vs ring decode attention across a cp group on the
simulated clock; see 'decode --help'), all (default), ${
  Object.entries(SUITES).map(([k, s]) => `${k} (${s.description})`).join(', ')
}

Options:
  --gpu=auto|wgpu|dawn   WebGPU implementation (default auto)
  --adapter NAME|N       the adapter whose name contains NAME, or the N-th Dawn finds (Dawn)
  --subgroups on|off     subgroup kernel variants where the adapter has them (default off)
  --json FILE            also write the JSON results to FILE
  --sizes LIST           comma-separated square sizes for size sweeps (matmul: ${DEFAULT_MATMUL_SIZES.join(',')})
  --attn SPEC            attention suite shape, e.g. b=1,nh=4,hs=64,causal=1,reps=3,tiled=0 (T from --sizes)
  -h, --help             this text`;

interface BenchArgs {
  suites: string[];
  backend: Backend;
  /** Dawn's adapter by name substring or index (src/gpu/dawn_adapters.ts). */
  adapter?: string;
  /** `--subgroups`: the kernels' subgroup variants (src/gpu/context.ts). */
  subgroups: SubgroupChoice;
  json?: string;
  sizes?: number[];
  attn?: string;
  help: boolean;
}

/**
 * Parses `argv`.
 * @throws Error for an unknown flag or suite, a bad --gpu or --sizes value, naming what is allowed.
 */
export function parseBenchArgs(argv: string[]): BenchArgs {
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      options: {
        gpu: { type: 'string', default: 'auto' },
        adapter: { type: 'string' },
        subgroups: { type: 'string', default: 'off' },
        json: { type: 'string' },
        sizes: { type: 'string' },
        attn: { type: 'string' },
        help: { type: 'boolean', short: 'h', default: false },
      },
      allowPositionals: true,
      strict: true,
    });
  } catch (e) {
    throw new Error(`${(e as Error).message.split('\n')[0]} (see --help)`);
  }
  const { values, positionals } = parsed;
  const backends = ['auto', 'wgpu', 'dawn'];
  if (!backends.includes(values.gpu)) {
    throw new Error(`--gpu must be one of ${backends.join(', ')}, got '${values.gpu}'`);
  }
  const subgroups = parseSubgroupsFlag(values.subgroups) ?? 'off';
  const names = positionals.length ? positionals : ['all'];
  const suites: string[] = [];
  for (const name of names) {
    if (name === 'all') suites.push(...Object.keys(SUITES));
    else if (name in SUITES) suites.push(name);
    else throw new Error(`Unknown suite '${name}'; allowed: all, ${Object.keys(SUITES).join(', ')}`);
  }
  let sizes: number[] | undefined;
  if (values.sizes !== undefined) {
    sizes = values.sizes.split(',').map((s) => (/^\d+$/.test(s.trim()) ? Number(s.trim()) : NaN));
    if (!sizes.length || sizes.some((s) => !Number.isInteger(s) || s < 1)) {
      throw new Error(`--sizes expects comma-separated positive integers, got '${values.sizes}'`);
    }
  }
  return {
    suites: [...new Set(suites)],
    backend: values.gpu as Backend,
    adapter: values.adapter,
    subgroups,
    json: values.json,
    sizes,
    attn: values.attn,
    help: values.help,
  };
}

async function main(argv: string[]): Promise<number> {
  if (argv[0] === 'comm') return await commMain(argv.slice(1)); // collectives on CPU workers: own flags, no GPU
  if (argv[0] === 'decode') return await decodeMain(argv.slice(1)); // in-process ranks, simulated clock: no GPU
  let args: BenchArgs;
  try {
    args = parseBenchArgs(argv);
  } catch (e) {
    console.error(`bench: ${(e as Error).message}`);
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
  const results: Record<string, unknown> = {};
  try {
    for (const name of args.suites) {
      console.log(`\n== ${name}: ${SUITES[name].description}`);
      results[name] = await SUITES[name].run({ gpu, sizes: args.sizes, attn: args.attn, log: console.log });
    }
  } finally {
    gpu.destroy();
  }
  const json = JSON.stringify(
    { backend: gpu.backend, adapter: gpu.adapterDescription, date: new Date().toISOString(), results },
    null,
    2,
  );
  if (args.json) await Deno.writeTextFile(args.json, json + '\n');
  console.log('\n' + json);
  return 0;
}

if (import.meta.main) {
  // Exit explicitly: Dawn keeps the process alive otherwise (docs/design.md §8).
  main(Deno.args).then(
    (code) => exitProcess(code),
    (e) => {
      console.error(`bench: ${(e as Error).message}`);
      exitProcess(1);
    },
  );
}
