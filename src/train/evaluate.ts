/**
 * Validation loss on fixed batches: the same `cfg.evalBatches` windows at every evaluation
 * and in every run (one reserved step index of the batch sampler), so numbers compare between
 * evaluations, runs and parallel plans.
 */
import { autocastOf } from '../autograd/autocast.ts';
import type { Precision } from './config.ts';
import type { Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { Tape } from '../autograd/tape.ts';
import { axpy } from '../kernels/elementwise.ts';
import type { LanguageModel } from '../models/model.ts';

/** The sampler's step index reserved for evaluation batches (never reached by training). */
export const EVAL_STEP = 0x7fff_0000;

/** Anything that draws (B, T) batches as a pure function of (split, seed, step, micro). */
export interface BatchSource {
  batch(
    split: 'train' | 'val',
    b: number,
    t: number,
    seed: number,
    step: number,
    micro: number,
  ): { x: Int32Array; y: Int32Array };
}

/**
 * Mean cross-entropy of `model` over `evalBatches` fixed batches of `split` (no gradients).
 * @param io (B, T) i32 input and target buffers to reuse; allocated and released when omitted.
 */
export async function meanLoss(
  gpu: Gpu,
  model: LanguageModel,
  data: BatchSource,
  cfg: {
    batchSize: number;
    blockSize: number;
    evalBatches: number;
    seed: number;
    precision?: Precision;
    topkAttention?: number;
  },
  split: 'train' | 'val' = 'val',
  io?: { tokens: Tensor; targets: Tensor },
): Promise<number> {
  const { batchSize: b, blockSize: t } = cfg;
  const tokens = io?.tokens ?? gpu.zeros([b, t], 'i32', 'eval.tokens');
  const targets = io?.targets ?? gpu.zeros([b, t], 'i32', 'eval.targets');
  const acc = gpu.zeros([2], 'f32', 'eval_acc');
  for (let i = 0; i < cfg.evalBatches; i++) {
    const batch = data.batch(split, b, t, cfg.seed, EVAL_STEP, i);
    gpu.write(tokens, batch.x);
    gpu.write(targets, batch.y);
    const tape = new Tape(gpu, new Map(), false);
    tape.autocast = autocastOf(cfg.precision ?? 'f32'); // validation runs the matmuls as training does
    tape.topk = cfg.topkAttention || null;
    const { loss } = await model.forward(tape, tokens, batch.x, targets, b, t);
    axpy(gpu, 1 / cfg.evalBatches, loss!, acc);
    tape.dispose();
  }
  const v = (await gpu.read(acc))[0];
  acc.release();
  if (!io) { for (const x of [tokens, targets]) x.release(); }
  return v;
}
