/**
 * `npm run experiment -- <name> [--out DIR] [--gpu B] [experiment flags]`: runs one of the
 * research-recipe experiments (src/experiments/*), which write a markdown table
 * (results.md), a CSV of every evaluation and SVG plots into the run folder.
 * Shared flags: --n-layer --n-embd --n-head --block-size --batch-size --eval-batches --seed.
 */
import { parseCliArgs } from '../util/parse_cli.ts';
import { type Experiment, modelFlags } from '../experiments/common.ts';
import { trainParallel } from './train_parallel.ts';
import { compression } from '../experiments/compression.ts';
import { lowComm } from '../experiments/low_comm.ts';
import { planModel } from '../experiments/plan_model.ts';
import { continual } from '../experiments/continual.ts';
import { depth } from '../experiments/depth.ts';
import { goldfish } from '../experiments/goldfish.ts';
import { neftune } from '../experiments/neftune.ts';
import { topk } from '../experiments/topk.ts';
import { scaling } from '../experiments/scaling.ts';
import { Gpu } from '../gpu/context.ts';
import type { Backend } from '../gpu/device.ts';
import { runCli } from './main.ts';

/** Every experiment by name. */
export const EXPERIMENTS: Record<string, Experiment> = {
  compression,
  continual,
  depth,
  goldfish,
  'low-comm': lowComm,
  neftune,
  'plan-model': planModel,
  scaling,
  topk,
};

export function experimentHelp(): string {
  return [
    'npm run experiment -- <name> [--out DIR] [--gpu auto|wgpu|dawn] [flags]',
    '',
    'shared flags (defaults: 2 layers, 4 heads, width 64; block × batch 32 × 16, goldfish 64 × 8): --n-layer --n-embd --n-head --block-size --batch-size --eval-batches 4 --seed 1337',
    '',
    ...Object.values(EXPERIMENTS).map((e) => e.help),
  ].join('\n');
}

/**
 * Runs the CLI; returns the summary markdown.
 * @throws Error for a missing or unknown experiment name, or a malformed flag.
 */
export async function main(argv: string[]): Promise<string | null> {
  const shared = ['out', 'gpu', 'n-layer', 'n-embd', 'n-head', 'block-size', 'batch-size', 'eval-batches', 'seed'];
  const ownFlags = (e: Experiment) => [...e.help.matchAll(/--([a-z-]+)/g)].map((m) => m[1]);
  const options: Record<string, { type: 'string' | 'boolean'; short?: string }> = {
    help: { type: 'boolean', short: 'h' },
  };
  for (const k of [...shared, ...Object.values(EXPERIMENTS).flatMap(ownFlags)]) options[k] = { type: 'string' };
  let parsed;
  try {
    parsed = parseCliArgs({ args: argv, options, strict: true, allowPositionals: true });
  } catch (e) {
    throw new Error(`${(e as Error).message.split('\n')[0]} (see --help)`);
  }
  const { values, positionals } = parsed;
  if (values.help) {
    console.log(experimentHelp());
    return null;
  }
  const name = positionals[0];
  if (!name || positionals.length > 1) {
    throw new Error(`give one experiment name; allowed: ${Object.keys(EXPERIMENTS).join(', ')}`);
  }
  const exp = EXPERIMENTS[name];
  if (!exp) throw new Error(`unknown experiment '${name}'; allowed: ${Object.keys(EXPERIMENTS).join(', ')}`);
  const flags: Record<string, string> = {};
  for (const [k, v] of Object.entries(values)) {
    if (typeof v !== 'string') throw new Error(`--${k} needs a value (see --help)`);
    flags[k] = v;
  }
  const allowed = new Set([...shared, ...ownFlags(exp)]);
  const unknown = Object.keys(flags).filter((k) => !allowed.has(k));
  if (unknown.length) {
    throw new Error(
      `unknown flag ${unknown.map((k) => `--${k}`).join(', ')} for '${name}'; allowed: ${
        [...allowed].map((k) => `--${k}`).join(' ')
      }`,
    );
  }
  modelFlags(flags, { nLayer: 1, nEmbd: 1, nHead: 1, blockSize: 1, batchSize: 1 }); // a bad shared flag: before any folder or GPU
  const out = flags.out ??
    `runs/experiment-${name}-${new Date().toISOString().replace(/[-:]/g, '').replace('T', '-').slice(0, 15)}`;
  await Deno.mkdir(out, { recursive: true });
  const gpu = await Gpu.create({ backend: (flags.gpu ?? 'auto') as Backend });
  try {
    const t0 = performance.now();
    const md = await exp.run({ gpu, out, flags, log: (l) => console.log(l), trainParallel });
    console.log(`\n${md}\n${name}: done in ${((performance.now() - t0) / 60000).toFixed(1)} min · outputs in ${out}/`);
    return md;
  } finally {
    gpu.destroy();
  }
}

if (import.meta.main) await runCli(main);
