/**
 * `npm run bench -- [suite] [--gpu=auto|wgpu|dawn] [--json FILE] [--sizes 128,256]`:
 * benchmarks on WebGPU (Deno's wgpu or Dawn). Prints a text table per suite, then all results
 * as JSON on stdout (and to FILE with --json). Suites live in src/bench/suites.ts; `all` (the
 * default) runs every one in order.
 *
 * Flags are parsed by node:util's parseArgs in strict mode (as `npm run train` does): an
 * unknown flag is an error, not a silent no-op.
 */
import { parseCliArgs } from '../util/parse_cli.ts';
import { Gpu, type SubgroupChoice } from '../gpu/context.ts';
import { parseSubgroupsFlag } from '../gpu/subgroups.ts';
import type { Backend } from '../gpu/device.ts';
import { commMain } from '../bench/comm.ts';
import { decodeMain } from '../bench/decode_cli.ts';
import { modelMain } from './bench_model.ts';
import { exitProcess } from './exit.ts';
import { DEFAULT_MATMUL_SIZES, SUITES } from '../bench/suites.ts';

const HELP = `Usage: npm run bench -- [suite] [options]

Suites: comm (collective layer; see 'comm --help'), decode (tree vs ring decode attention across a cp group on the
simulated clock; see 'decode --help'), model (measured step time of small plans beside the calibrated prediction;
see 'model --help'), all (default), ${Object.entries(SUITES).map(([k, s]) => `${k} (${s.description})`).join(', ')}

Options:
  --gpu=auto|wgpu|dawn   WebGPU implementation (default auto)
  --adapter NAME|N       the adapter whose name contains NAME, or the N-th Dawn finds (Dawn)
  --subgroups on|off     subgroup kernel variants where the adapter has them (default off)
  --json FILE            also write the JSON results to FILE
  --sizes LIST           comma-separated square sizes for size sweeps (matmul: ${DEFAULT_MATMUL_SIZES.join(',')}),
                         or the contexts of the sample suite (128,512)
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
    parsed = parseCliArgs({
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
  if (argv[0] === 'comm') return await commMain(argv.slice(1), new URL(import.meta.url)); // collectives on CPU workers: own flags, no GPU
  if (argv[0] === 'decode') return await decodeMain(argv.slice(1)); // in-process ranks, simulated clock: no GPU
  if (argv[0] === 'model') return await modelMain(argv.slice(1)); // worker runs beside predictStep: own flags
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
  // Exit explicitly: Dawn keeps the process alive otherwise (docs/design.md#runtime-quirks).
  main(Deno.args).then(
    (code) => exitProcess(code),
    (e) => {
      console.error(`bench: ${(e as Error).message}`);
      exitProcess(1);
    },
  );
}
