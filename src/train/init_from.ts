/**
 * `--init-from FILE`: a new run that starts from a GPT-2 checkpoint's weights (fine-tuning)
 * instead of a random initialisation. AdamW's moments start at zero, as in any new run.
 */
import type { ParamStore } from '../nn/params.ts';
import type { TrainConfig } from './config.ts';
import { decodeSafetensors } from '../util/safetensors.ts';
import { Gpt2ImportError, importGpt2 } from '../models/gpt2_hf.ts';

/**
 * Reads `file` (a Hugging Face GPT-2 safetensors) into `store`'s values.
 * @throws Gpt2ImportError when the run is not `--arch gpt`, the file cannot be read, or its
 *   tensors do not fit the run (see importGpt2); CorruptCheckpointError when it is not a
 *   well-formed safetensors file.
 */
export async function initFromGpt2(
  store: ParamStore,
  cfg: TrainConfig,
  vocabSize: number,
  file: string,
): Promise<void> {
  if (cfg.arch !== 'gpt') {
    throw new Gpt2ImportError(file, `GPT-2 checkpoints load into --arch gpt, not --arch ${cfg.arch}`);
  }
  let bytes: Uint8Array;
  try {
    bytes = await Deno.readFile(file);
  } catch (e) {
    throw new Gpt2ImportError(file, `cannot read it (${(e as Error).message})`);
  }
  const { tensors } = await decodeSafetensors(bytes, file, { foreign: true });
  const run = { ...cfg, vocabSize };
  const weights = importGpt2(tensors, run, store.params, file);
  const flat = new Float32Array(store.values.size);
  for (const p of store.params) flat.set(weights.get(p.name)!, p.offset);
  store.gpu.write(store.values, flat);
  await store.gpu.sync();
}
