/**
 * Validation loss on fixed batches: the same `cfg.evalBatches` global batches at every
 * evaluation and in every run (one reserved step index of the batch sampler, one stream per
 * batch), so numbers compare between evaluations, runs and parallel plans of the same global batch.
 */
import { autocastOf } from '../autograd/autocast.ts';
import type { Precision } from './config.ts';
import type { Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { Tape } from '../autograd/tape.ts';
import { axpy } from '../kernels/elementwise.ts';
import type { LanguageModel } from '../models/model.ts';
import { microBatchRows } from '../data/dataset.ts';

/** The sampler's step index reserved for evaluation batches (never reached by training). */
export const EVAL_STEP = 0x7fff_0000;

/** Anything that draws rows of a batch as a pure function of (split, seed, step, stream) (data/dataset.ts rows). */
export interface BatchSource {
  rows(
    split: 'train' | 'val',
    t: number,
    seed: number,
    step: number,
    from: number,
    to: number,
    stream?: number,
  ): { x: Int32Array; y: Int32Array };
}

/**
 * The evaluation passes of a run, however it splits its batch: evaluation batch i is the global
 * batch (G = B × micro-batches rows) drawn by stream i of step EVAL_STEP, and pass j of it reads
 * rows [j·B, (j+1)·B) — data-parallel rank `rank` of `dp` its B/dp rows of those (dataset.ts
 * microBatchRows). A run with one micro-batch reads B rows per batch, as before the split was
 * counted; every split of the same G averages the same G·evalBatches rows.
 * @throws Error from microBatchRows (B not divisible by dp).
 */
export function evalPasses(
  cfg: { batchSize: number; evalBatches: number; gradAccum?: number },
  rank = 0,
  dp = 1,
): { stream: number; from: number; to: number }[] {
  const out: { stream: number; from: number; to: number }[] = [];
  for (let i = 0; i < cfg.evalBatches; i++) {
    for (let j = 0; j < (cfg.gradAccum ?? 1); j++) {
      out.push({ stream: i, ...microBatchRows(j, cfg.batchSize, rank, dp) });
    }
  }
  return out;
}

/**
 * Mean cross-entropy of `model` over `evalBatches` fixed batches of `split` (no gradients), each
 * the global batch of B × gradAccum rows, run B rows at a time ({@link evalPasses}).
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
    gradAccum?: number;
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
  const passes = evalPasses(cfg);
  for (const p of passes) {
    const batch = data.rows(split, t, cfg.seed, EVAL_STEP, p.from, p.to, p.stream);
    gpu.write(tokens, batch.x);
    gpu.write(targets, batch.y);
    const tape = new Tape(gpu, new Map(), false);
    tape.autocast = autocastOf(cfg.precision ?? 'f32'); // validation runs the matmuls as training does
    tape.topk = cfg.topkAttention || null;
    const { loss } = await model.forward(tape, tokens, batch.x, targets, b, t);
    axpy(gpu, 1 / passes.length, loss!, acc);
    tape.dispose();
  }
  const v = (await gpu.read(acc))[0];
  acc.release();
  if (!io) { for (const x of [tokens, targets]) x.release(); }
  return v;
}
