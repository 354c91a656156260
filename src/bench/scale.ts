/**
 * The scale suite (`npm run scale`): what one adapter achieves at sizes a real GPU is bought for.
 * f32 matmul GFLOP/s by size (the shipped kernel against each tile forced, the plain 16×16 tile
 * kernel and, with shader-f16, f16 operands, in the same run), FlashAttention-2 forward +
 * backward by sequence length and head size, and a training step of a GPT-2-124M-shaped model
 * (12 layers, 12 heads, width 768, block 1024, vocabulary 50257; Radford et al. 2019) in
 * tokens/s with MFU and the pool's peak bytes. `--quick` shrinks every shape so CPU adapters
 * finish in CI. docs/design.md §8 says how the figures are taken.
 */
import type { Gpu } from '../gpu/context.ts';
import { TextDataset } from '../data/dataset.ts';
import { parseConfig } from '../train/config.ts';
import type { KernelTime } from '../gpu/profiler.ts';
import { matmul, matmulPlain, matmulTuning } from '../kernels/matmul.ts';
import { fill, timeKernels } from './timing.ts';
import { castToF16 } from '../kernels/cast.ts';
import { benchAttention } from './attention.ts';
import { benchTrainConfig } from './train.ts';
import { Random } from '../util/random.ts';
import type { Precision } from '../train/config.ts';
import { withSubgroups } from './subgroups.ts';

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

/**
 * Causal attention FLOPs of forward + backward: forward 4·b·nh·T²·hs halved by the mask, backward
 * 2.5 times the forward (FlashAttention-2's convention, Dao 2023, arXiv 2307.08691 §4).
 */
export function attentionFlops(b: number, nh: number, t: number, hs: number): number {
  return 3.5 * 2 * b * nh * t * t * hs;
}

/** Runs the matmul sweep (f32, NN, beta 0). */
export async function scaleMatmul(gpu: Gpu, sizes: number[]): Promise<ScaleMatmulRow[]> {
  const rows: ScaleMatmulRow[] = [];
  for (const n of sizes) {
    const a = gpu.upload(fill(n * n, 1), [n, n], 'f32', 'scale.a');
    const b = gpu.upload(fill(n * n, 2), [n, n], 'f32', 'scale.b');
    const c = gpu.empty([n, n], 'f32', 'scale.c');
    const withTile = (tile: 0 | 64 | 128) => (batch: number) => {
      const saved = { ...matmulTuning };
      Object.assign(matmulTuning, { tile, forceTiled: tile !== 0, forceRegister: false });
      try {
        for (let i = 0; i < batch; i++) matmul(gpu, a, b, c, n, n, n);
      } finally {
        Object.assign(matmulTuning, saved);
      }
    };
    const plain = (batch: number) => {
      for (let i = 0; i < batch; i++) matmulPlain(gpu, a, b, c, n, n, n);
    };
    const f16 = gpu.features.has('shader-f16');
    const a16 = f16 ? gpu.empty([n, n], 'f16', 'scale.a16') : null;
    const b16 = f16 ? gpu.empty([n, n], 'f16', 'scale.b16') : null;
    if (a16 && b16) {
      castToF16(gpu, a, a16);
      castToF16(gpu, b, b16);
    }
    const half = (batch: number) => {
      for (let i = 0; i < batch; i++) matmul(gpu, a16!, b16!, c, n, n, n);
    };
    // Where the device has subgroups, the other setting than the shipped one is timed too.
    const sg = gpu.features.has('subgroups');
    const flipped = (batch: number) => withSubgroups(gpu, !gpu.subgroups, () => withTile(0)(batch));
    try {
      const t = { reps: 3, minRepMs: 50, maxMsPerShape: 5_000 };
      const kernels = [withTile(0), withTile(64), withTile(128), plain, half, flipped];
      const on = [true, true, true, true, f16, sg];
      const times = await timeKernels(gpu, kernels.filter((_, i) => on[i]), t);
      const [shipped, t64, t128, tp, th, tf] = on.map((x) => (x ? times.shift() : undefined));
      const [tOn, tOff] = !sg ? [] : gpu.subgroups ? [shipped, tf] : [tf, shipped];
      const gf = (ms: number) => (2 * n ** 3) / (ms * 1e6);
      rows.push({
        n,
        ms: shipped!,
        gflops: gf(shipped!),
        tile64Gflops: gf(t64!),
        tile128Gflops: gf(t128!),
        plainGflops: gf(tp!),
        f16Gflops: th === undefined ? null : gf(th),
        subgroupGflops: tOn === undefined ? null : gf(tOn),
        noSubgroupGflops: tOff === undefined ? null : gf(tOff),
      });
    } finally {
      for (const x of [a, b, c, a16, b16]) x?.release();
    }
  }
  return rows;
}

/**
 * Runs the FlashAttention sweep (causal, f32), and the same shapes with f16 q, k, v (shader-f16)
 * and with the subgroup kernels off (subgroups) where the device has each; a shape over a device
 * limit keeps its note.
 */
export async function scaleAttention(gpu: Gpu, a: ScaleShapes['attention']): Promise<ScaleAttentionRow[]> {
  const out: ScaleAttentionRow[] = [];
  const sweep = (hs: number, half = false) =>
    benchAttention(gpu, { sizes: a.t, b: a.b, nh: a.nh, hs, reps: 3, kernels: ['flash'], half });
  for (const hs of a.hs) {
    const rows = await sweep(hs);
    const f16 = gpu.features.has('shader-f16') ? await sweep(hs, true) : null;
    const sg = gpu.features.has('subgroups');
    const flipped = sg ? await withSubgroups(gpu, !gpu.subgroups, () => sweep(hs)) : null;
    const [on, off] = !sg ? [null, null] : gpu.subgroups ? [rows, flipped] : [flipped, rows];
    for (const [i, r] of rows.entries()) {
      const tflops = r.ms === null ? null : attentionFlops(a.b, a.nh, r.t, hs) / (r.ms * 1e9);
      out.push({
        t: r.t,
        hs,
        nh: a.nh,
        b: a.b,
        ms: r.ms,
        tflops,
        peakBytes: r.peakBytes,
        variant: r.variant,
        note: r.note,
        f16Ms: f16?.[i].ms ?? null,
        subgroupMs: on?.[i].ms ?? null,
        noSubgroupMs: off?.[i].ms ?? null,
      });
    }
  }
  return out;
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
