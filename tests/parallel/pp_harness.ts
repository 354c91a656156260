/**
 * Pipeline-parallel test fixtures: the single-rank reference with gradients and parameters by
 * name, and worlds of tests/parallel/pp_worker.ts (bundled once per process by tests/comm/world.ts).
 * The tiny run and text are harness.ts's.
 */
import type { World } from '../../src/comm/launch.ts';
import { parseConfig, type TrainConfig } from '../../src/train/config.ts';
import { createModel } from '../../src/models/registry.ts';
import { Trainer } from '../../src/train/trainer.ts';
import { CharTokenizer } from '../../src/data/tokenizer.ts';
import { TextDataset } from '../../src/data/dataset.ts';
import type { Gpu } from '../../src/gpu/context.ts';
import type { PipelineOptions } from '../../src/parallel/pipeline.ts';
import type { Span } from '../../src/parallel/pipeline_sim.ts';
import type { Sent } from '../../src/parallel/traffic.ts';
import { TEXT } from './harness.ts';
import { withRankWorld } from '../comm/world.ts';

export interface PpArgs {
  cfg: Partial<TrainConfig>;
  text: string;
  opts: PipelineOptions;
}

export interface PpResult {
  losses: number[];
  gradNorms: number[];
  sent: Sent[];
  timelines: Span[][];
  /** Per step: wall clock (epoch ms) of the step's start; timeline times are relative to it. */
  origins: number[];
  /** This rank's step-0 gradients by parameter name. */
  grads0: Record<string, Float32Array>;
  /** This rank's parameters after the run, by name. */
  params: Record<string, Float32Array>;
}

export interface PpReference {
  losses: number[];
  gradNorms: number[];
  /** Parameter names in the single-rank model's order. */
  names: string[];
  grads0: Record<string, Float32Array>;
  params: Record<string, Float32Array>;
  vocabSize: number;
}

/** The single-rank run (the unchanged Trainer, gradAccum 1 over the whole batch), by parameter name. */
export async function referenceByName(gpu: Gpu, over: Partial<TrainConfig>): Promise<PpReference> {
  const cfg: TrainConfig = parseConfig(over);
  const tok = CharTokenizer.fromText(TEXT);
  const data = new TextDataset(tok.encode(TEXT), cfg.blockSize);
  const model = createModel(gpu, cfg, tok.vocabSize);
  const trainer = new Trainer(gpu, model, data, cfg);
  const byName = (flat: Float32Array) => Object.fromEntries(model.params.params.map((p) => [p.name, flat.slice(p.offset, p.offset + p.size)]));
  await trainer.step(0);
  const grads0 = byName(await gpu.read(model.params.grads) as Float32Array);
  for (let s = 1; s < cfg.steps; s++) await trainer.step(s);
  const recs = await trainer.drain();
  const params = byName(await gpu.read(model.params.values) as Float32Array);
  const names = model.params.params.map((p) => p.name);
  model.params.destroy();
  return { losses: recs.map((r) => r.loss), gradNorms: recs.map((r) => r.gradNorm), names, grads0, params, vocabSize: tok.vocabSize };
}

/** Concatenates, in `names` order, each name's array from the first rank result that has it. */
export function gather(names: string[], parts: Record<string, Float32Array>[]): Float32Array {
  const arrays = names.map((n) => {
    const a = parts.find((p) => n in p)?.[n];
    if (!a) throw new Error(`no rank holds parameter '${n}'`);
    return a;
  });
  const out = new Float32Array(arrays.reduce((s, a) => s + a.length, 0));
  let o = 0;
  for (const a of arrays) out.set(a, (o += a.length) - a.length);
  return out;
}


/** Launches `size` pipeline workers (see {@link withRankWorld}). */
export const withPpWorld = <T>(size: number, body: (w: World) => Promise<T>): Promise<T> => withRankWorld('pp_worker.ts', size, body);
