/**
 * The scale suite (`npm run scale`): what one adapter achieves at sizes a real GPU is bought for.
 * f32 matmul GFLOP/s by size (the shipped kernel against each tile forced, the plain 16×16 tile
 * kernel and, with shader-f16, f16 operands, in the same run), FlashAttention-2 forward +
 * backward by sequence length and head size, and a training step of a GPT-2-124M-shaped model
 * (12 layers, 12 heads, width 768, block 1024, vocabulary 50257; Radford et al. 2019) in
 * tokens/s with MFU and the pool's peak bytes. `--quick` shrinks every shape so CPU adapters
 * finish in CI. docs/design.md#runtime-quirks says how the figures are taken.
 */
import type { Gpu } from '../gpu/context.ts';
import { TextDataset } from '../data/dataset.ts';
import { parseConfig } from '../train/config.ts';
import type { KernelTime } from '../gpu/profiler.ts';
import { scaleAttention, scaleMatmul } from './scale_kernels.ts';
import { benchTrainConfig } from './train.ts';
import { Random } from '../util/random.ts';
import type { Precision } from '../train/config.ts';
import { withSubgroups } from './subgroups.ts';

export { attentionFlops, scaleAttention, scaleMatmul } from './scale_kernels.ts';

/** The shapes one scale run measures. */
export interface ScaleShapes {
  /** Square matmul sizes (M = N = K). */
  matmul: number[];
  /** Attention: sequence lengths, head sizes, heads, batch. */
  attention: { t: number[]; hs: number[]; nh: number; b: number };
  /** The training-step model and its batch. */
  train: {
    name: string;
    nLayer: number;
    nHead: number;
    nEmbd: number;
    blockSize: number;
    vocabSize: number;
    batchSize: number;
    steps: number;
    warmup: number;
  };
}

/** GPT-2 small's shape (124M parameters with the tied head), as in nanoGPT's config/train_gpt2.py. */
const GPT2_124M = { name: 'gpt2-124m', nLayer: 12, nHead: 12, nEmbd: 768, blockSize: 1024, vocabSize: 50257 };

/**
 * The full suite's shapes (matmul to 8192³, attention to T = 16384 at head sizes 64 and 128,
 * GPT-2-124M at `batchSize` sequences of 1024), or `--quick`'s small ones for CPU adapters.
 * Sizes whose buffers exceed the adapter's binding limit are dropped here, not attempted.
 */
export function scaleShapes(gpu: Gpu, quick: boolean, batchSize?: number): ScaleShapes {
  if (quick) {
    return {
      matmul: [64, 128],
      attention: { t: [64, 128], hs: [32], nh: 2, b: 1 },
      train: {
        name: 'gpt-quick',
        nLayer: 2,
        nHead: 2,
        nEmbd: 64,
        blockSize: 64,
        vocabSize: 256,
        batchSize: batchSize ?? 2,
        steps: 2,
        warmup: 1,
      },
    };
  }
  const limit = gpu.device.limits.maxStorageBufferBindingSize;
  return {
    matmul: [256, 512, 1024, 2048, 4096, 8192].filter((n) => n * n * 4 <= limit),
    attention: { t: [1024, 2048, 4096, 8192, 16384], hs: [64, 128], nh: 12, b: 1 },
    train: { ...GPT2_124M, batchSize: batchSize ?? 4, steps: 5, warmup: 2 },
  };
}

/**
 * One matmul size: the shipped kernel's time and rate (whichever tile `matmul` picks there), and
 * beside it each GPU tile forced and the plain 16×16 kernel, timed in the same rounds.
 */
export interface ScaleMatmulRow {
  n: number;
  ms: number;
  gflops: number;
  tile64Gflops: number;
  tile128Gflops: number;
  plainGflops: number;
  /** The shipped kernel with f16 operands (f32 accumulation; null without shader-f16). */
  f16Gflops: number | null;
  /**
   * The shipped kernel with its subgroup variants on and off (both null on a device without
   * subgroups; the one that matches `Gpu.subgroups` is the shipped timing, the other is timed).
   */
  subgroupGflops: number | null;
  noSubgroupGflops: number | null;
}

/** One attention shape: forward + backward time, model TFLOP/s and the call's peak pool bytes. */
export interface ScaleAttentionRow {
  t: number;
  hs: number;
  nh: number;
  b: number;
  ms: number | null;
  tflops: number | null;
  peakBytes: number | null;
  variant?: string;
  note?: string;
  /** The same call with q, k, v in f16 (null without shader-f16). */
  f16Ms: number | null;
  /** The same call with the subgroup kernels on and off (as {@link ScaleMatmulRow.subgroupGflops}). */
  subgroupMs: number | null;
  noSubgroupMs: number | null;
}

/** The training step: rate, MFU (0 when no peak is known) and the pool's peak bytes. */
export interface ScaleTrainRow {
  name: string;
  /** What this row measures: 'shipped', 'f16-mixed', 'subgroups' or 'no subgroups'. */
  variant: string;
  /** `--precision` of the step, and whether the subgroup kernels ran. */
  precision: Precision;
  subgroups: boolean;
  params: number;
  tokensPerStep: number;
  msPerStep: number;
  tokensPerSec: number;
  tflops: number;
  mfu: number;
  peakBytes: number;
  /** GPU time per kernel of one profiled step, slowest first (empty without timestamp queries). */
  kernels: KernelTime[];
}

/** Everything one run measured. */
export interface ScaleResult {
  matmul: ScaleMatmulRow[];
  attention: ScaleAttentionRow[];
  /** The shipped step: f32, subgroup kernels wherever the device has them. */
  train: ScaleTrainRow;
  /** The same step at f16-mixed (shader-f16) and with the other subgroup setting (subgroups), where each applies. */
  trainVariants: ScaleTrainRow[];
}

/** n token ids uniform in [0, vocab): the step's cost does not depend on the text. */
function randomTokens(n: number, vocab: number, seed = 7): Int32Array {
  const rng = new Random(seed);
  return Int32Array.from({ length: n }, () => rng.int(vocab));
}

/**
 * Times optimizer steps of the GPT model `shape` describes on random tokens (bias on, tied
 * head, FlashAttention, AdamW). MFU = model FLOP/s (6N + 12·L·C·T per token) / `peakTflops`.
 */
export async function scaleTrain(
  gpu: Gpu,
  shape: ScaleShapes['train'],
  peakTflops: number,
  precision: Precision = 'f32',
  variant = 'shipped',
): Promise<ScaleTrainRow> {
  const { name, vocabSize, steps, warmup, ...dims } = shape;
  const cfg = parseConfig({
    ...dims,
    precision,
    gradAccum: 1,
    steps: steps + warmup + 2,
    warmup: 0,
    logInterval: steps + warmup + 2,
    evalInterval: steps + warmup + 2,
    ckptInterval: 0,
  });
  const data = new TextDataset(randomTokens(cfg.batchSize * cfg.blockSize * 8 + 1, vocabSize), cfg.blockSize);
  const r = await benchTrainConfig(gpu, cfg, data, vocabSize, steps, warmup, { compareUnfused: false });
  const tflops = r.gflops / 1e3;
  return {
    name,
    variant,
    precision,
    subgroups: gpu.subgroups,
    params: r.params,
    tokensPerStep: r.tokensPerStep,
    msPerStep: r.msPerStep,
    tokensPerSec: r.tokensPerSec,
    tflops,
    mfu: peakTflops > 0 ? tflops / peakTflops : 0,
    peakBytes: r.peakBytes,
    kernels: [...r.kernels].sort((x, y) => y.ms - x.ms),
  };
}

/**
 * Runs the whole suite, logging each part's start so a long run shows where it is, and handing
 * the results so far to `onPart` after each part (a run stopped by a time limit keeps them).
 * @param peakTflops the MFU denominator (0 = unknown).
 */
export async function runScale(
  gpu: Gpu,
  shapes: ScaleShapes,
  peakTflops: number,
  log: (line: string) => void,
  onPart: (done: Partial<ScaleResult>) => Promise<void> = async () => {},
): Promise<ScaleResult> {
  log(`matmul f32: ${shapes.matmul.join(', ')}`);
  const matmul = await scaleMatmul(gpu, shapes.matmul);
  await onPart({ matmul });
  const a = shapes.attention;
  log(`flash attention f32 fwd+bwd: T ${a.t.join(', ')} × hs ${a.hs.join(', ')}, ${a.nh} heads`);
  const attention = await scaleAttention(gpu, a);
  await onPart({ attention });
  const s = shapes.train;
  log(`training step: ${s.name}, ${s.batchSize}×${s.blockSize} tokens`);
  const train = await scaleTrain(gpu, s, peakTflops);
  await onPart({ train });
  const trainVariants: ScaleTrainRow[] = [];
  if (gpu.features.has('shader-f16')) {
    log('training step: f16-mixed');
    trainVariants.push(await scaleTrain(gpu, s, peakTflops, 'f16-mixed', 'f16-mixed'));
  }
  if (gpu.features.has('subgroups')) {
    const label = gpu.subgroups ? 'no subgroups' : 'subgroups';
    log(`training step: f32, ${label}`);
    trainVariants.push(await withSubgroups(gpu, !gpu.subgroups, () => scaleTrain(gpu, s, peakTflops, 'f32', label)));
  }
  await onPart({ trainVariants });
  return { matmul, attention, train, trainVariants };
}
