/**
 * `npm run memorization -- --checkpoint runs/x/ckpt.safetensors [--samples N] [--prompt 32]
 * [--continuation 32] [--batch 32] [--seed S] [--json FILE]`: Pythia's memorization measure
 * (src/train/memorization.ts) on the checkpoint's own training data, train split vs held-out.
 */
import { parseCliArgs } from '../util/parse_cli.ts';
import { loadTrainingData } from '../io/corpus.ts';
import { loadIntoStore, parseCheckpoint } from '../train/checkpoint.ts';
import { parseConfig } from '../train/config.ts';
import { measureMemorization, type MemorizationScore } from '../train/memorization.ts';
import { Gpu } from '../gpu/context.ts';
import type { Backend } from '../gpu/device.ts';
import { createModel } from '../models/registry.ts';
import { runCli } from './main.ts';

const HELP = `npm run memorization -- --checkpoint FILE [flags]
  --checkpoint FILE    a training checkpoint (ckpt.safetensors or ckpt-<step>.safetensors)
  --samples N          sequences per split (default 256)
  --prompt P           prompt tokens (default 32, as Pythia)
  --continuation L     greedily generated tokens compared with the data (default 32)
  --batch B            prompts per forward pass (default 64)
  --seed S             which windows are drawn (default 0)
  --json FILE          also write the scores as JSON
  --gpu B              auto | wgpu | dawn (default auto)
  --allow-legacy-checkpoint   read a checkpoint written before whole-file digests (its data_sha256 is still verified)`;

function count(flag: string, v: string | undefined, def: number, min: number): number {
  if (v === undefined) return def;
  const n = Number(v);
  if (!/^\d+$/.test(v) || n < min) throw new Error(`--${flag} expects an integer ≥ ${min}, got '${v}'`);
  return n;
}

/** One table line per split. */
export function formatScores(r: Record<string, MemorizationScore>): string {
  const rows = Object.entries(r).map(([s, v]) =>
    `${s.padEnd(6)} ${String(v.n).padStart(7)} ${(v.exactMatch * 100).toFixed(2).padStart(10)}% ${
      v.score.toFixed(4).padStart(9)
    }`
  );
  return ['split  samples exact match     score', ...rows].join('\n');
}

/** Runs the CLI; returns the scores. @throws Error for bad flags or an unreadable checkpoint. */
export async function main(argv: string[]): Promise<Record<string, MemorizationScore> | null> {
  let values: Record<string, string | boolean | undefined>;
  try {
    ({ values } = parseCliArgs({
      args: argv,
      strict: true,
      options: {
        checkpoint: { type: 'string' },
        samples: { type: 'string' },
        prompt: { type: 'string' },
        continuation: { type: 'string' },
        batch: { type: 'string' },
        seed: { type: 'string' },
        json: { type: 'string' },
        gpu: { type: 'string' },
        help: { type: 'boolean', short: 'h' },
        'allow-legacy-checkpoint': { type: 'boolean' },
      },
    }));
  } catch (e) {
    throw new Error(`${(e as Error).message.split('\n')[0]} (see --help)`);
  }
  if (values.help) {
    console.log(HELP);
    return null;
  }
  const path = values.checkpoint as string | undefined;
  if (!path) throw new Error('--checkpoint FILE is required (a ckpt.safetensors written by npm run train)');
  const samples = count('samples', values.samples as string, 256, 1);
  const promptLen = count('prompt', values.prompt as string, 32, 1);
  const continuation = count('continuation', values.continuation as string, 32, 1);
  const batch = count('batch', values.batch as string, 64, 1);
  const seed = count('seed', values.seed as string, 0, 0);
  let bytes: Uint8Array;
  try {
    bytes = await Deno.readFile(path);
  } catch (e) {
    throw new Error(`Cannot read checkpoint '${path}': ${(e as Error).message}`);
  }
  const ckpt = await parseCheckpoint(bytes, path, { allowLegacy: values['allow-legacy-checkpoint'] === true });
  const cfg = parseConfig(ckpt.state.config);
  // Windows of prompt + continuation tokens must fit each split, whatever the model's block size.
  const { tokenizer, data } = await loadTrainingData(
    { ...cfg, blockSize: promptLen + continuation },
    ckpt.state.tokenizer,
  );
  const gpu = await Gpu.create({ backend: ((values.gpu as string) ?? 'auto') as Backend });
  try {
    const model = createModel(gpu, cfg, tokenizer.vocabSize);
    loadIntoStore(model.params, ckpt, path);
    const t0 = performance.now();
    const r = await measureMemorization(gpu, model, data, { samples, seed, promptLen, continuation, batch });
    console.log(
      `memorization of ${path} (step ${ckpt.state.step}, data ${cfg.data}): prompt ${promptLen}, greedy ${continuation} tokens, ${
        ((performance.now() - t0) / 1000).toFixed(1)
      } s`,
    );
    console.log(formatScores(r));
    if (values.json) {
      await Deno.writeTextFile(
        values.json as string,
        JSON.stringify({ checkpoint: path, step: ckpt.state.step, promptLen, continuation, ...r }, null, 2) + '\n',
      );
    }
    return r;
  } finally {
    gpu.destroy();
  }
}

if (import.meta.main) await runCli(main);
