/**
 * Tensor-parallel test harness: the single-rank reference (the unchanged Trainer, gradients
 * and parameters by name) and tp runs whose ranks are in-process Communicators
 * (src/comm/local.ts) sharing the test's GPU, or module workers (tp_worker.ts) with a device each.
 */
import { closeLocalWorld, localWorld, onEveryRank } from '../../src/comm/local.ts';
import type { Communicator } from '../../src/comm/communicator.ts';
import { parseConfig, type TrainConfig } from '../../src/train/config.ts';
import { createModel } from '../../src/models/registry.ts';
import { Trainer } from '../../src/train/trainer.ts';
import { CharTokenizer } from '../../src/data/tokenizer.ts';
import { TextDataset } from '../../src/data/dataset.ts';
import type { Gpu } from '../../src/gpu/context.ts';
import type { Sent } from '../../src/parallel/traffic.ts';
import { shardKind, unshardParam } from '../../src/parallel/tp_table.ts';
import { ModelStages } from '../../src/parallel/stages.ts';
import { RankContext } from '../../src/parallel/rank_context.ts';
import { TensorParallelTrainer } from '../../src/parallel/tp_trainer.ts';
import { gptParamSpecs } from '../../src/models/gpt.ts';
import { withRankWorld } from '../comm/world.ts';

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

/** The single-rank run: losses, norms, step-0 gradients and final parameters by name. */
export async function tpReference(gpu: Gpu, over: Partial<TrainConfig>, text: string) {
  const cfg = parseConfig(over);
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
  return { losses: recs.map((r) => r.loss), gradNorms: recs.map((r) => r.gradNorm), grads0, params, vocabSize: tok.vocabSize };
}

export interface TpRunResult {
  losses: number[];
  gradNorms: number[];
  sent: Sent[];
  /** This rank's gradient shards of step 0, by name. */
  grads0: Named;
  /** This rank's parameter shards after the run, by name. */
  params: Named;
}

/** Trains `cfg` on one tp rank of `group` (every rank calls it with the same arguments). */
export async function trainRank(gpu: Gpu, group: Communicator, over: Partial<TrainConfig>, text: string, sp: boolean): Promise<TpRunResult> {
  const cfg = parseConfig(over);
  const { tok, data } = tinyData(text, cfg.blockSize);
  const ctx = new RankContext({ tp: group, vocabSize: tok.vocabSize, sequenceParallel: sp });
  const model = new ModelStages(gpu, cfg, tok.vocabSize, ctx, { ppRank: 0, pp: 1, v: 1 });
  const trainer = new TensorParallelTrainer(gpu, model, data, cfg);
  const res: TpRunResult = { losses: [], gradNorms: [], sent: [], grads0: {}, params: {} };
  for (let s = 0; s < cfg.steps; s++) {
    const rec = await trainer.step(s);
    res.losses.push(rec.loss);
    res.gradNorms.push(rec.gradNorm);
    res.sent.push(rec.sent);
    if (s === 0) res.grads0 = await trainer.gradients();
  }
  res.params = await trainer.parameters();
  trainer.dispose();
  model.params.destroy();
  return res;
}

/** A tp run whose `size` ranks are in-process communicators sharing `gpu`. */
export async function localTpRun(gpu: Gpu, size: number, over: Partial<TrainConfig>, text: string, sp: boolean): Promise<TpRunResult[]> {
  const world = localWorld(size, { timeoutMs: 120_000 });
  try {
    return await onEveryRank(world, (c) => trainRank(gpu, c, over, text, sp));
  } finally {
    closeLocalWorld(world);
  }
}

/** Every rank's shards joined into full parameters (padded vocabulary rows dropped), by name. */
export function gather(shards: Named[], over: Partial<TrainConfig>, vocabSize: number): Named {
  const cfg = parseConfig(over);
  return Object.fromEntries(gptParamSpecs({ ...cfg, vocabSize }).map((s) => [s.name, unshardParam(shardKind(s.name), shards.map((x) => x[s.name]), s.shape)]));
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

/** A tp run on `size` module workers, each with its own device; always shuts the world down. */
export function workerTpRun(size: number, cfg: Partial<TrainConfig>, text: string, sp: boolean): Promise<TpRunResult[]> {
  return withRankWorld('tp_worker.ts', size, (w) => w.run<TpRunResult>('train', { cfg, text, sp }));
}
