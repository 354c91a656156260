/**
 * Training-step benchmark: ms/step and tokens/s of a preset on the shipped data, timed over
 * several steps after warm-up steps that compile pipelines and fill the buffer pool. The same
 * trainer also runs with linear layers' bias as a separate pass (`matmulTuning.fuseBias =
 * false`, the sequence before the matmul bias epilogue), in alternating rounds, so the
 * fused/unfused ratio holds even when a busy CPU-WebGPU machine makes absolute times wander.
 */
import type { Gpu } from '../gpu/context.ts';
import type { KernelTime } from '../gpu/profiler.ts';
import { createModel } from '../models/registry.ts';
import { Trainer } from '../train/trainer.ts';
import { parseConfig, PRESETS, type TrainConfig } from '../train/config.ts';
import { CharTokenizer } from '../data/tokenizer.ts';
import { TextDataset } from '../data/dataset.ts';
import { matmulTuning } from '../kernels/matmul.ts';

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
  /** ms/step with the bias of linear layers as a second pass over their output (absent when not measured). */
  unfusedMsPerStep?: number;
  /** unfusedMsPerStep / msPerStep: above 1 when the fused bias epilogue is faster. */
  fusedSpeedup?: number;
}

/** Options of {@link benchTrain}. */
export interface TrainBenchOptions {
  /** Also time the unfused bias path (default true); doubles the timed steps. */
  compareUnfused?: boolean;
  /** Steps per timed round; fused and unfused rounds alternate (default 2). */
  roundSteps?: number;
}

/**
 * Times `steps` optimizer steps of `preset` on `text` (char-level), fused bias (the shipped
 * path) and, unless `compareUnfused` is false, as many unfused; ms/step is total time over steps.
 * @throws Error for an unknown preset, steps < 1 or warmup < 0.
 */
export async function benchTrain(
  gpu: Gpu,
  text: string,
  preset = 'tiny',
  steps = 10,
  warmup = 2,
  opts: TrainBenchOptions = {},
): Promise<TrainBenchRow> {
  if (!(preset in PRESETS)) {
    throw new Error(`benchTrain: unknown preset '${preset}'; allowed: ${Object.keys(PRESETS).join(', ')}`);
  }
  const cfg = parseConfig({ ...PRESETS[preset], logInterval: steps + warmup });
  const tok = CharTokenizer.fromText(text);
  const data = new TextDataset(tok.encode(text), cfg.blockSize);
  return { preset, ...(await benchTrainConfig(gpu, cfg, data, tok.vocabSize, steps, warmup, opts)) };
}

/**
 * Times `steps` optimizer steps of the model `cfg` describes on `data` with a vocabulary of
 * `vocabSize`, after `warmup` untimed steps; see {@link benchTrain}. The pool's peak is reset
 * before the model is built, so `peakBytes` covers parameters, optimizer state, activations and
 * scratch of one step.
 * @throws Error when steps < 1 or warmup < 0.
 */
export async function benchTrainConfig(
  gpu: Gpu,
  cfg: TrainConfig,
  data: TextDataset,
  vocabSize: number,
  steps: number,
  warmup: number,
  opts: TrainBenchOptions = {},
): Promise<Omit<TrainBenchRow, 'preset'> & { peakBytes: number }> {
  if (!Number.isInteger(steps) || steps < 1 || !Number.isInteger(warmup) || warmup < 0) {
    throw new Error(`benchTrain: steps and warmup must be integers ≥ 1 and ≥ 0, got ${steps} and ${warmup}`);
  }
  const compare = opts.compareUnfused ?? true;
  const roundSteps = Math.max(1, Math.min(steps, opts.roundSteps ?? 2));
  await gpu.sync();
  gpu.pool.resetPeak();
  const model = createModel(gpu, cfg, vocabSize);
  const trainer = new Trainer(gpu, model, data, cfg);
  const fuseBefore = matmulTuning.fuseBias;
  let step = 0;
  /** Runs `n` steps with the bias fused or not, returning their wall time (ms). */
  const timed = async (n: number, fused: boolean): Promise<number> => {
    matmulTuning.fuseBias = fused;
    try {
      const t0 = performance.now();
      for (let i = 0; i < n; i++) await trainer.step(step++);
      await trainer.drain();
      return performance.now() - t0;
    } finally {
      matmulTuning.fuseBias = fuseBefore;
    }
  };
  await timed(warmup, true);
  if (compare) await timed(1, false); // compiles the unfused path's add_bias pipeline
  let [fusedMs, unfusedMs] = [0, 0];
  for (let done = 0; done < steps; done += roundSteps) {
    const n = Math.min(roundSteps, steps - done);
    fusedMs += await timed(n, true);
    if (compare) unfusedMs += await timed(n, false);
  }
  const ms = fusedMs / steps;
  // One more step, profiled separately so the timed steps above carry no query overhead.
  let kernels: KernelTime[] = [];
  if (gpu.features.has('timestamp-query')) {
    gpu.startProfiling();
    await trainer.step(step++);
    kernels = await gpu.stopProfiling();
    await trainer.drain();
  }
  const tokensPerStep = cfg.batchSize * cfg.blockSize * cfg.gradAccum;
  const peakBytes = gpu.pool.stats.peakBytes;
  model.params.destroy();
  return {
    peakBytes,
    params: model.numParams(),
    tokensPerStep,
    msPerStep: ms,
    tokensPerSec: (tokensPerStep * 1000) / ms,
    gflops: (model.flopsPerToken(cfg.blockSize) * tokensPerStep) / (ms * 1e6),
    kernels,
    ...(compare ? { unfusedMsPerStep: unfusedMs / steps, fusedSpeedup: unfusedMs / fusedMs } : {}),
  };
}
