/**
 * The single-rank run every parallel plan is checked against: the unchanged Trainer on the
 * whole global batch, its losses, norms, step-0 gradients and final parameters by name.
 */
import { parseConfig, type TrainConfig } from '../../src/train/config.ts';
import { createModel } from '../../src/models/registry.ts';
import { Trainer } from '../../src/train/trainer.ts';
import { CharTokenizer } from '../../src/data/tokenizer.ts';
import { TextDataset } from '../../src/data/dataset.ts';
import type { Gpu } from '../../src/gpu/context.ts';
import type { ParallelPlan } from '../../src/parallel/plan/plan.ts';
import { plainConfig } from './mesh_rank.ts';

export type Named = Record<string, Float32Array>;

/**
 * The longest prefix of the first 4 KB of Tiny Shakespeare with an odd number of distinct
 * characters (2186 characters, V = 51), so tp 2 pads the vocabulary to 52 and rank 1's last
 * wte row is padding the cross-entropy must exclude.
 */
export function oddVocabText(text: string): string {
  const seen = new Set<string>();
  let end = 0;
  for (let i = 0; i < text.length; i++) {
    seen.add(text[i]);
    if (seen.size % 2 === 1) end = i + 1;
  }
  return text.slice(0, end);
}

/** The tiny run's data: tokenizer and dataset over `text`. */
export function tinyData(text: string, blockSize: number) {
  const tok = CharTokenizer.fromText(text);
  return { tok, data: new TextDataset(tok.encode(text), blockSize) };
}

/** What {@link singleRankRun} returns. */
export type SingleRankResult = Awaited<ReturnType<typeof runSingleRank>>;

// One run per (config, text) in a test file: many plans are checked against the same baseline, and
// the run is deterministic, so repeating it would only cost time.
const runs = new Map<string, Promise<SingleRankResult>>();

/**
 * The single-rank run: losses, norms, step-0 gradients and final parameters by name. A second call
 * with the same parsed config and text returns the first call's result (shared, not copied: read it only).
 */
export function singleRankRun(gpu: Gpu, over: Partial<TrainConfig>, text: string): Promise<SingleRankResult> {
  const cfg = parseConfig(over);
  const key = JSON.stringify([cfg, text]);
  let run = runs.get(key);
  if (!run) {
    run = runSingleRank(gpu, cfg, text);
    runs.set(key, run);
    run.catch(() => runs.delete(key)); // a failed run is not a baseline
  }
  return run;
}

async function runSingleRank(gpu: Gpu, cfg: TrainConfig, text: string) {
  const { tok, data } = tinyData(text, cfg.blockSize);
  const model = createModel(gpu, cfg, tok.vocabSize);
  const trainer = new Trainer(gpu, model, data, cfg);
  const named = async (flat: typeof model.params.grads): Promise<Named> => {
    const all = await gpu.read(flat) as Float32Array;
    return Object.fromEntries(model.params.params.map((p) => [p.name, all.slice(p.offset, p.offset + p.size)]));
  };
  await trainer.step(0);
  const grads0 = await named(model.params.grads);
  for (let s = 1; s < cfg.steps; s++) await trainer.step(s);
  const recs = await trainer.drain();
  const params = await named(model.params.values);
  model.params.destroy();
  return {
    losses: recs.map((r) => r.loss),
    gradNorms: recs.map((r) => r.gradNorm),
    grads0,
    params,
    vocabSize: tok.vocabSize,
  };
}

/**
 * The single-rank twin of a plan's run on `over`: the plain run of its global batch (mesh_rank.ts
 * plainConfig), whatever micro-batches the plan splits it into, memoised per resulting config:
 * `twin(plan, over)`.
 */
export function twins(
  gpu: Gpu,
  text: string,
): (plan: ParallelPlan, over: Partial<TrainConfig>) => ReturnType<typeof singleRankRun> {
  const memo = new Map<string, ReturnType<typeof singleRankRun>>();
  return (_plan, over) => {
    const cfg = plainConfig(over), key = JSON.stringify(cfg);
    if (!memo.has(key)) memo.set(key, singleRankRun(gpu, cfg, text));
    return memo.get(key)!;
  };
}

/** Concatenation of named arrays in `names` order. */
export function flat(named: Named, names: string[]): Float32Array {
  const out = new Float32Array(names.reduce((a, n) => a + named[n].length, 0));
  let off = 0;
  for (const n of names) {
    out.set(named[n], off);
    off += named[n].length;
  }
  return out;
}
