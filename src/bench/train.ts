/**
 * Training-step benchmark: ms/step and tokens/s of a preset on the shipped data, timed over
 * several steps after warm-up steps that compile pipelines and fill the buffer pool.
 */
import type { Gpu } from '../gpu/context.ts';
import type { KernelTime } from '../gpu/profiler.ts';
import { createModel } from '../models/registry.ts';
import { Trainer } from '../train/trainer.ts';
import { parseConfig, PRESETS } from '../train/config.ts';
import { CharTokenizer } from '../data/tokenizer.ts';
import { TextDataset } from '../data/dataset.ts';

export interface TrainBenchRow {
  preset: string;
  params: number;
  tokensPerStep: number;
  msPerStep: number;
  tokensPerSec: number;
  /** Model FLOPs per second achieved (6N + 12LCT per token), GFLOP/s. */
  gflops: number;
  /** GPU time per kernel of one profiled step (when the adapter has timestamp queries). */
  kernels: KernelTime[];
}

/** Times `steps` optimizer steps of `preset` on `text` (char-level). */
export async function benchTrain(gpu: Gpu, text: string, preset = 'tiny', steps = 10, warmup = 2): Promise<TrainBenchRow> {
  const cfg = parseConfig({ ...PRESETS[preset], logInterval: steps + warmup });
  const tok = CharTokenizer.fromText(text);
  const data = new TextDataset(tok.encode(text), cfg.blockSize);
  const model = createModel(gpu, cfg, tok.vocabSize);
  const trainer = new Trainer(gpu, model, data, cfg);
  for (let s = 0; s < warmup; s++) trainer.step(s);
  await trainer.drain();
  const t0 = performance.now();
  for (let s = warmup; s < warmup + steps; s++) trainer.step(s);
  await trainer.drain();
  const ms = (performance.now() - t0) / steps;
  // One more step, profiled separately so the timed steps above carry no query overhead.
  let kernels: KernelTime[] = [];
  if (gpu.features.has('timestamp-query')) {
    gpu.startProfiling();
    trainer.step(warmup + steps);
    kernels = await gpu.stopProfiling();
    await trainer.drain();
  }
  const tokensPerStep = cfg.batchSize * cfg.blockSize * cfg.gradAccum;
  model.params.destroy();
  return {
    preset,
    params: model.numParams(),
    tokensPerStep,
    msPerStep: ms,
    tokensPerSec: (tokensPerStep * 1000) / ms,
    gflops: (model.flopsPerToken(cfg.blockSize) * tokensPerStep) / (ms * 1e6),
    kernels,
  };
}
