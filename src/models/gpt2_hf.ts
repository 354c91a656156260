/**
 * Hugging Face GPT-2 checkpoints (transformers' GPT2Model / GPT2LMHeadModel as safetensors) to
 * and from our GPT's parameters, as nanoGPT's `GPT.from_pretrained` maps them: the names lose
 * (or gain) the `transformer.` prefix; the four Conv1D weights (`attn.c_attn`, `attn.c_proj`,
 * `mlp.c_fc`, `mlp.c_proj`) are stored (in, out) there and (out, in) here, so they are transposed;
 * the head is tied to `wte` (a separate `lm_head.weight` must equal it); the causal-mask buffers
 * (`h.N.attn.bias`, `h.N.attn.masked_bias`) are not parameters and are skipped. A run's block size
 * may be shorter than the file's 1024 positions: `wpe` is cropped (nanoGPT's crop_block_size).
 * A run with --pad-vocab gets the file's 50 257 rows of `wte` and zero padded rows, as a fresh
 * padded model has (models/vocab_pad.ts), so fine-tuning trains exactly as unpadded.
 */
import type { NamedTensor } from '../util/safetensors.ts';

/** Our names (after `transformer.h.N.`) of the weights GPT-2 stores as Conv1D (in, out). */
const CONV1D = ['attn.c_attn.weight', 'attn.c_proj.weight', 'mlp.c_fc.weight', 'mlp.c_proj.weight'];

/** The shape a GPT-2 checkpoint fixes (the head count is not in the tensors). */
export interface Gpt2Shape {
  nLayer: number;
  nEmbd: number;
  vocabSize: number;
  /** Positions in `wpe`: the longest block the checkpoint supports. */
  positions: number;
}

/** What an imported run must match: our GPT's config fields. */
export interface Gpt2RunShape {
  nLayer: number;
  nEmbd: number;
  nHead: number;
  /** The tokenizer's vocabulary (the file's `wte` rows); our `wte` may have more (--pad-vocab). */
  vocabSize: number;
  blockSize: number;
  bias: boolean;
}

/** A file that is not a GPT-2 checkpoint, or one that does not fit the run. */
export class Gpt2ImportError extends Error {
  constructor(what: string, detail: string) {
    super(`--init-from ${what}: ${detail}`);
    this.name = 'Gpt2ImportError';
  }
}

/** `h.0.ln_1.weight` or `transformer.h.0.ln_1.weight` → `transformer.h.0.ln_1.weight`; null for non-parameters. */
function ourName(hf: string): string | null {
  const n = hf.startsWith('transformer.') ? hf.slice('transformer.'.length) : hf;
  if (/^h\.\d+\.attn\.(bias|masked_bias)$/.test(n) || n === 'lm_head.weight') return null;
  return `transformer.${n}`;
}

/** (rows, cols) row-major → (cols, rows). */
function transpose(data: Float32Array, rows: number, cols: number): Float32Array {
  const out = new Float32Array(data.length);
  for (let i = 0; i < rows; i++) for (let j = 0; j < cols; j++) out[j * rows + i] = data[i * cols + j];
  return out;
}

const isConv1d = (name: string) => CONV1D.some((s) => name.endsWith(`.${s}`)) && name.includes('.h.');

/**
 * The shape of a GPT-2 checkpoint's tensors.
 * @throws Gpt2ImportError when `wte`, `wpe` or layer 0 is missing or a 2-D shape is wrong.
 */
export function gpt2ShapeOf(tensors: Map<string, NamedTensor>, what: string): Gpt2Shape {
  const get = (n: string) => tensors.get(n) ?? tensors.get(`transformer.${n}`);
  const wte = get('wte.weight'), wpe = get('wpe.weight');
  if (!wte || !wpe || wte.shape.length !== 2 || wpe.shape.length !== 2) {
    throw new Gpt2ImportError(what, "not a GPT-2 checkpoint: it needs 2-D 'wte.weight' and 'wpe.weight'");
  }
  let nLayer = 0;
  while (get(`h.${nLayer}.ln_1.weight`)) nLayer++;
  if (nLayer === 0) throw new Gpt2ImportError(what, "not a GPT-2 checkpoint: no 'h.0.ln_1.weight'");
  return { nLayer, nEmbd: wte.shape[1], vocabSize: wte.shape[0], positions: wpe.shape[0] };
}

/**
 * Our parameters (nanoGPT names, our layout) from a GPT-2 checkpoint's tensors, for a run of
 * shape `run`. Every parameter our GPT declares must be present with the shape GPT-2 gives it.
 * @param ourShapes our parameter names and shapes (the model's ParamStore), in any order.
 * @throws Gpt2ImportError naming the file and what differs: the layer count, width or vocabulary
 *   against the run (with the flags to pass), a block size over the file's positions, a run
 *   without biases, a missing, extra or misshapen tensor, or an `lm_head.weight` that is not `wte`.
 */
export function importGpt2(
  tensors: Map<string, NamedTensor>,
  run: Gpt2RunShape,
  ourShapes: { name: string; shape: readonly number[] }[],
  what: string,
): Map<string, Float32Array> {
  const s = gpt2ShapeOf(tensors, what);
  const diffs = [
    s.nLayer !== run.nLayer && `${s.nLayer} layers (--n-layer ${s.nLayer}, run has ${run.nLayer})`,
    s.nEmbd !== run.nEmbd && `width ${s.nEmbd} (--n-embd ${s.nEmbd}, run has ${run.nEmbd})`,
    s.vocabSize !== run.vocabSize &&
    `a vocabulary of ${s.vocabSize} (GPT-2's is 50257: --tokenizer gpt2; the run's tokenizer has ${run.vocabSize})`,
  ].filter(Boolean);
  if (diffs.length) throw new Gpt2ImportError(what, `the checkpoint has ${diffs.join(', ')}`);
  if (run.blockSize > s.positions) {
    throw new Gpt2ImportError(what, `--block-size ${run.blockSize} exceeds the checkpoint's ${s.positions} positions`);
  }
  if (!run.bias) throw new Gpt2ImportError(what, 'GPT-2 has biases in every Linear layer: drop --no-bias');
  if (run.nEmbd % run.nHead !== 0) {
    throw new Gpt2ImportError(what, `--n-head ${run.nHead} does not divide the checkpoint's width ${run.nEmbd}`);
  }
  const byOurName = new Map<string, NamedTensor>();
  for (const [hf, t] of tensors) {
    const n = ourName(hf);
    if (n !== null) byOurName.set(n, t);
  }
  const head = tensors.get('lm_head.weight');
  const wte = byOurName.get('transformer.wte.weight')!;
  if (head && !(head.data.length === wte.data.length && head.data.every((v, i) => v === wte.data[i]))) {
    throw new Gpt2ImportError(what, "'lm_head.weight' differs from 'wte.weight'; only a head tied to wte is supported");
  }
  const out = new Map<string, Float32Array>();
  for (const { name, shape } of ourShapes) {
    const t = byOurName.get(name);
    if (!t) throw new Gpt2ImportError(what, `missing tensor '${name.replace(/^transformer\./, '')}'`);
    byOurName.delete(name);
    const conv = isConv1d(name);
    const wpe = name === 'transformer.wpe.weight', wte = name === 'transformer.wte.weight';
    const want = conv
      ? [shape[1], shape[0]]
      : wpe
      ? [s.positions, shape[1]]
      : wte
      ? [s.vocabSize, shape[1]]
      : [...shape];
    if (t.shape.length !== want.length || t.shape.some((d, i) => d !== want[i])) {
      throw new Gpt2ImportError(what, `tensor '${t.name}' is [${t.shape}], expected [${want}]`);
    }
    if (wte && shape[0] < s.vocabSize) {
      throw new Gpt2ImportError(what, `the run's wte has ${shape[0]} rows, fewer than the file's ${s.vocabSize}`);
    }
    if (conv) out.set(name, transpose(t.data, want[0], want[1]));
    else if (wpe) out.set(name, t.data.slice(0, shape[0] * shape[1]));
    else if (wte) {
      const padded = new Float32Array(shape[0] * shape[1]); // rows past the file's are --pad-vocab padding: zero
      padded.set(t.data);
      out.set(name, padded);
    } else out.set(name, t.data);
  }
  if (byOurName.size) {
    throw new Gpt2ImportError(what, `tensors a GPT-2 of this shape does not have: ${[...byOurName.keys()].join(', ')}`);
  }
  return out;
}

/**
 * Our GPT's parameters as a GPT-2 checkpoint's tensors (Hugging Face names without a prefix,
 * Conv1D weights as (in, out), no separate head): what transformers' GPT2LMHeadModel loads.
 * @throws Error when a Linear layer has no bias (GPT-2's layout has one everywhere).
 */
export function exportGpt2(params: { name: string; shape: readonly number[]; data: Float32Array }[]): NamedTensor[] {
  const names = new Set(params.map((p) => p.name));
  for (const p of params) {
    if (isConv1d(p.name) && !names.has(p.name.replace(/\.weight$/, '.bias'))) {
      throw new Error(`exportGpt2: '${p.name}' has no bias; GPT-2's layout has biases in every Linear layer`);
    }
  }
  return params.map((p) => {
    const name = p.name.replace(/^transformer\./, '');
    if (!isConv1d(p.name)) return { name, shape: [...p.shape], data: p.data };
    const [rows, cols] = p.shape;
    return { name, shape: [cols, rows], data: transpose(p.data, rows, cols) };
  });
}
