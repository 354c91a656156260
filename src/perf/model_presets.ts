/**
 * Model shapes `npm run plan -- --search/--advise --model` accepts: named presets at paper scale
 * and `key=value` dimensions. Every model is priced as this project's GPT block (src/models/gpt.ts:
 * multi-head attention, a 4h GELU MLP, tied embeddings), so a preset of another family keeps its
 * depth, width, heads, context and vocabulary but not its MLP or grouped-query attention.
 */
import type { PlanModel } from '../parallel/plan/plan.ts';
import { MAX_SEARCH_BATCH } from './plan_space.ts';

/** A model shape with its default global batch (sequences per optimizer step). */
export interface ModelPreset extends PlanModel {
  name: string;
  source: string;
}

const p = (
  name: string,
  nLayer: number,
  nHead: number,
  nEmbd: number,
  blockSize: number,
  vocabSize: number,
  batchSize: number,
  source: string,
): ModelPreset => ({ name, nLayer, nHead, nEmbd, blockSize, vocabSize, batchSize, source });

const MEGATRON = 'Narayanan et al., arXiv 2104.04473, Table 1 (seq 2048, vocab 51200)';

/**
 * Every named model. The `megatron-*` shapes are the rows of the validation table of
 * docs/design.md#a-performance-model-that-chooses-the-plan.
 */
export const MODEL_PRESETS: Record<string, ModelPreset> = {
  'gpt3-175b': p(
    'gpt3-175b',
    96,
    96,
    12288,
    2048,
    51200,
    1536,
    'Brown et al., arXiv 2005.14165 (vocab padded as Megatron)',
  ),
  'llama2-70b': p(
    'llama2-70b',
    80,
    64,
    8192,
    4096,
    32000,
    1024,
    'Touvron et al., arXiv 2307.09288 (depth, width, heads; GPT block here)',
  ),
  'megatron-1.7b': p('megatron-1.7b', 24, 24, 2304, 2048, 51200, 512, MEGATRON),
  'megatron-3.6b': p('megatron-3.6b', 30, 32, 3072, 2048, 51200, 512, MEGATRON),
  'megatron-7.5b': p('megatron-7.5b', 36, 32, 4096, 2048, 51200, 512, MEGATRON),
  'megatron-18b': p('megatron-18b', 40, 48, 6144, 2048, 51200, 1024, MEGATRON),
  'megatron-39b': p('megatron-39b', 48, 64, 8192, 2048, 51200, 1536, MEGATRON),
  'megatron-76b': p('megatron-76b', 60, 80, 10240, 2048, 51200, 1792, MEGATRON),
  'megatron-146b': p('megatron-146b', 80, 96, 12288, 2048, 51200, 2304, MEGATRON),
  'megatron-310b': p('megatron-310b', 96, 128, 16384, 2048, 51200, 2160, MEGATRON),
  'megatron-530b': p('megatron-530b', 105, 128, 20480, 2048, 51200, 2520, MEGATRON),
  'megatron-1t': p('megatron-1t', 128, 160, 25600, 2048, 51200, 3072, MEGATRON),
};

const KEYS: Record<string, keyof PlanModel> = {
  layers: 'nLayer',
  l: 'nLayer',
  heads: 'nHead',
  a: 'nHead',
  hidden: 'nEmbd',
  h: 'nEmbd',
  seq: 'blockSize',
  s: 'blockSize',
  vocab: 'vocabSize',
  v: 'vocabSize',
  batch: 'batchSize',
  b: 'batchSize',
};
const FORMAT = `a preset (${
  Object.keys(MODEL_PRESETS).join(', ')
}) or dimensions 'layers=L,heads=A,hidden=H,seq=S,vocab=V[,batch=B]' (short: l, a, h, s, v, b), optionally after a preset: 'gpt3-175b,vocab=50257'`;

/**
 * The model `--model` / `--advise` names: a preset, dimensions, or a preset with some replaced.
 * Without a batch the global batch defaults to 512 for dimensions.
 * @throws Error naming the unknown preset or key, a value that is not a positive integer, a batch
 *   above MAX_SEARCH_BATCH, or a missing dimension.
 */
export function parseModel(text: string): ModelPreset {
  const parts = text.split(',').map((x) => x.trim()).filter(Boolean);
  let base: ModelPreset | undefined;
  if (parts.length && !parts[0].includes('=')) {
    base = MODEL_PRESETS[parts[0].toLowerCase()];
    if (!base) throw new Error(`unknown model '${parts[0]}'; expected ${FORMAT}`);
    parts.shift();
  }
  const out: Partial<ModelPreset> = base ? { ...base } : { batchSize: 512, name: 'custom', source: 'dimensions' };
  for (const part of parts) {
    const [k, v] = part.split('=').map((x) => x.trim()), key = KEYS[(k ?? '').toLowerCase()];
    if (!key) throw new Error(`model: unknown dimension '${k}' in '${part}'; expected ${FORMAT}`);
    const n = /^\d+$/.test(v ?? '') ? Number(v) : NaN;
    if (!Number.isSafeInteger(n) || n < 1) throw new Error(`model: ${k} must be a positive integer, got '${v}'`);
    if (key === 'batchSize' && n > MAX_SEARCH_BATCH) {
      throw new Error(`model: ${k} ${n} exceeds the maximum global batch ${MAX_SEARCH_BATCH}`);
    }
    (out as Record<string, number>)[key] = n;
    if (base) out.name = `${base.name} (modified)`;
  }
  const missing = ['nLayer', 'nHead', 'nEmbd', 'blockSize', 'vocabSize'].filter((k) => !(k in out));
  if (missing.length) throw new Error(`model: missing ${missing.join(', ')} in '${text}'; expected ${FORMAT}`);
  return out as ModelPreset;
}
