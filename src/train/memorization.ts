/**
 * Memorization as the Pythia authors measure it (Biderman et al., "Emergent and Predictable
 * Memorization in Large Language Models", arXiv 2304.11158 §2; Pythia, arXiv 2304.01373):
 * a sequence of the training data is memorized when, prompted with its first 32 tokens, greedy
 * decoding reproduces the next 32 exactly. The memorization score is the mean share of
 * continuation tokens reproduced. Held-out (val) sequences give the baseline a model reaches
 * by generalising alone.
 */
import type { Gpu } from '../gpu/context.ts';
import { Tape } from '../autograd/tape.ts';
import { type LanguageModel, logitsOf, realVocabOf } from '../models/model.ts';
import type { Split } from '../data/dataset.ts';
import { mixSeed } from '../util/random.ts';

/** Scores of one set of sequences. */
export interface MemorizationScore {
  /** Sequences scored. */
  n: number;
  /** Share of sequences whose whole continuation was reproduced (0 … 1). */
  exactMatch: number;
  /** Mean share of continuation tokens reproduced at their position (0 … 1). */
  score: number;
}

/**
 * Scores generated continuations against the true ones, both (N, L) row-major.
 * @throws Error when the sizes differ or are not whole rows of `length`.
 */
export function scoreContinuations(generated: Int32Array, truth: Int32Array, length: number): MemorizationScore {
  if (generated.length !== truth.length || length < 1 || truth.length % length !== 0) {
    throw new Error(
      `scoreContinuations: generated (${generated.length}) and truth (${truth.length}) must be equal whole rows of ${length}`,
    );
  }
  const n = truth.length / length;
  let exact = 0;
  let matched = 0;
  for (let r = 0; r < n; r++) {
    let m = 0;
    for (let j = 0; j < length; j++) if (generated[r * length + j] === truth[r * length + j]) m++;
    matched += m;
    if (m === length) exact++;
  }
  return { n, exactMatch: n ? exact / n : 0, score: n ? matched / (n * length) : 0 };
}

/** Largest logits read back per forward (B·T·V floats), so a GPT-2 vocabulary stays within memory. */
const MAX_READ = 1 << 24;

/**
 * Greedy decoding of many prompts at once: prompts (N, P) → the next `steps` tokens (N, steps).
 * Each forward runs a batch of rows at a fixed (B, T) shape padded on the right (causality
 * makes the padding invisible); contexts longer than the block size keep their last T tokens.
 * Ties go to the lowest token id.
 * @throws Error when the prompt length is 0 or the prompts are not whole rows.
 */
export async function greedyGenerate(
  gpu: Gpu,
  model: LanguageModel,
  prompts: Int32Array,
  promptLen: number,
  steps: number,
  batch = 32,
): Promise<Int32Array> {
  if (promptLen < 1 || prompts.length % promptLen !== 0) {
    throw new Error(
      `greedyGenerate: prompts (${prompts.length}) must be whole rows of a prompt length ≥ 1 (${promptLen})`,
    );
  }
  const n = prompts.length / promptLen;
  const V = model.cfg.vocabSize, real = realVocabOf(model.cfg); // row stride; argmax over real ids only
  const T = Math.min(model.cfg.blockSize, promptLen + steps - 1);
  const B = Math.max(1, Math.min(batch, n, Math.floor(MAX_READ / (T * V))));
  const out = new Int32Array(n * steps);
  const tokens = gpu.zeros([B, T], 'i32', 'greedy_ctx');
  for (let r0 = 0; r0 < n; r0 += B) {
    const rows = Math.min(B, n - r0);
    const seqs = Array.from(
      { length: rows },
      (_, i) => Array.from(prompts.subarray((r0 + i) * promptLen, (r0 + i + 1) * promptLen)),
    );
    for (let k = 0; k < steps; k++) {
      const len = Math.min(T, promptLen + k);
      const host = new Int32Array(B * T);
      for (let i = 0; i < rows; i++) host.set(seqs[i].slice(-len), i * T);
      gpu.write(tokens, host);
      const tape = new Tape(gpu, new Map(), false);
      const logits = logitsOf(await model.forward(tape, tokens, host, null, B, T), 'memorization'); // (B·T, V)
      const all = (await gpu.read(logits)) as Float32Array;
      tape.dispose();
      for (let i = 0; i < rows; i++) {
        const base = (i * T + len - 1) * V;
        let best = 0;
        for (let v = 1; v < real; v++) if (all[base + v] > all[base + best]) best = v;
        seqs[i].push(best);
        out[(r0 + i) * steps + k] = best;
      }
    }
  }
  tokens.release();
  return out;
}

/** Anything that draws (B, T) windows of a split as a pure function of (seed, step). */
export interface WindowSource {
  batch(split: Split, b: number, t: number, seed: number, step: number, micro?: number): { x: Int32Array };
}

/** Salt of the memorization sample, so it differs from every training and eval batch. */
const MEM_SALT = 0x6d_65_6d_6f;

/**
 * Measures memorization on `samples` windows of each split: prompt with the first
 * `promptLen` tokens (Pythia: 32), greedily generate `continuation` (Pythia: 32), compare.
 * The windows are a pure function of `seed`, so two checkpoints are scored on the same text.
 * @throws Error (from the data) when a split is shorter than promptLen + continuation + 1.
 */
export async function measureMemorization(
  gpu: Gpu,
  model: LanguageModel,
  data: WindowSource,
  o: { samples: number; seed: number; promptLen?: number; continuation?: number; batch?: number },
): Promise<Record<Split, MemorizationScore>> {
  const p = o.promptLen ?? 32;
  const c = o.continuation ?? 32;
  if (!Number.isInteger(o.samples) || o.samples < 1) {
    throw new Error(`memorization: samples must be a positive integer, got ${o.samples}`);
  }
  const result = {} as Record<Split, MemorizationScore>;
  for (const split of ['train', 'val'] as const) {
    const { x } = data.batch(split, o.samples, p + c, mixSeed(o.seed, MEM_SALT), 0);
    const prompts = new Int32Array(o.samples * p);
    const truth = new Int32Array(o.samples * c);
    for (let r = 0; r < o.samples; r++) {
      prompts.set(x.subarray(r * (p + c), r * (p + c) + p), r * p);
      truth.set(x.subarray(r * (p + c) + p, (r + 1) * (p + c)), r * c);
    }
    result[split] = scoreContinuations(await greedyGenerate(gpu, model, prompts, p, c, o.batch), truth, c);
  }
  return result;
}
