/**
 * `npm run export -- --from runs/NAME/ckpt.safetensors --out model.safetensors`: a training
 * checkpoint of `--arch gpt` as a Hugging Face GPT-2 checkpoint (src/models/gpt2_hf.ts), the
 * layout transformers' GPT2LMHeadModel loads. The checkpoint is verified whole first; the
 * output is written atomically.
 */
import { parseCliArgs } from '../util/parse_cli.ts';
import { parseCheckpoint } from '../train/checkpoint.ts';
import { encodeSafetensors } from '../util/safetensors.ts';
import { exportGpt2 } from '../models/gpt2_hf.ts';
import { tokenizerFromJSON } from '../data/tokenizer.ts';
import { writeAtomic } from '../io/atomic.ts';
import { exitProcess } from './exit.ts';

const HELP = `Usage: npm run export -- --from CKPT --out FILE

Writes a --arch gpt training checkpoint as a Hugging Face GPT-2 safetensors file (Conv1D
layout, tied head, no AdamW state). Train from one with npm run train -- --init-from FILE.`;

/**
 * Converts checkpoint bytes to GPT-2 safetensors bytes.
 * @throws CorruptCheckpointError for a checkpoint that does not verify; Error for one that is
 *   not --arch gpt or was trained without biases.
 */
export async function exportCheckpoint(bytes: Uint8Array, what: string): Promise<Uint8Array> {
  const { state, tensors } = await parseCheckpoint(bytes, what);
  const arch = (state.config as { arch?: string }).arch ?? 'gpt';
  if (arch !== 'gpt') throw new Error(`export: ${what} is --arch ${arch}; the GPT-2 layout holds --arch gpt only`);
  const params = [...tensors.values()].filter((t) => !t.name.startsWith('optim.'));
  // A --pad-vocab run's padded rows are not tokens: the GPT-2 layout holds the tokenizer's V rows.
  const real = (state.config.padVocab ?? 1) > 1 ? (await tokenizerFromJSON(state.tokenizer)).vocabSize : Infinity;
  const cropped = params.map((t) =>
    t.name === 'transformer.wte.weight' && t.shape[0] > real
      ? { ...t, shape: [real, t.shape[1]], data: t.data.slice(0, real * t.shape[1]) }
      : t
  );
  return await encodeSafetensors(exportGpt2(cropped), { format: 'pt' });
}

async function main(argv: string[]): Promise<number> {
  let v;
  try {
    v = parseCliArgs({
      args: argv,
      options: { from: { type: 'string' }, out: { type: 'string' }, help: { type: 'boolean', short: 'h' } },
      strict: true,
    }).values;
  } catch (e) {
    console.error(`export: ${(e as Error).message.split('\n')[0]} (see --help)`);
    return 2;
  }
  if (v.help) {
    console.log(HELP);
    return 0;
  }
  if (!v.from || !v.out) {
    console.error('export: --from CKPT and --out FILE are both required (see --help)');
    return 2;
  }
  try {
    await writeAtomic(v.out, await exportCheckpoint(await Deno.readFile(v.from), v.from));
  } catch (e) {
    console.error(`export: ${(e as Error).message}`);
    return 1;
  }
  console.log(`export: wrote ${v.out} (GPT-2 layout)`);
  return 0;
}

if (import.meta.main) main(Deno.args).then(exitProcess);
