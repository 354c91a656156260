/**
 * A tokenised corpus split 90/10 into train and validation, with batches that are a pure
 * function of (seed, split, step): the batch a run trained on at any step can be rebuilt
 * without replaying the run (as Pythia's data loader allows), and a resumed run sees exactly
 * the batches an uninterrupted one would.
 *
 * One global batch per step, however it is split (docs/design.md#batch-order): the
 * G = B × micro-batches rows of step s are the first G windows drawn from ONE generator seeded
 * by (seed, split, s, 0), in row order. Micro-batch j takes rows [j·B, (j+1)·B) and data-parallel
 * rank r of d takes its B/d rows of those ({@link microBatchRows}), so `--batch-size 16`,
 * `--batch-size 8 --grad-accum 2` and any parallel plan with a global batch of 16 train on the
 * same rows; a plain run (one micro-batch) reads what it read before this order existed.
 */
import { mixSeed, Random } from '../util/random.ts';

export type Split = 'train' | 'val';

/** One batch: inputs x and next-token targets y, both (B, T) row-major. */
export interface Batch {
  x: Int32Array;
  y: Int32Array;
}

/** Stream id of each split in the batch seed (exported for the mixture sampler). */
export const SPLIT_ID: Record<Split, number> = { train: 1, val: 2 };

/**
 * The batch order checkpoints record (train/checkpoint.ts, parallel/run/rank_checkpoint.ts): 1 drew
 * micro-batch j from its own generator (seed, split, step, j); 2 draws the whole global batch
 * from one generator (the module doc). They read the same rows when a step has one micro-batch.
 */
export const BATCH_ORDER = 2;

/**
 * Refuses to continue, under this code's batch order, a checkpoint written under another one
 * that drew other rows (order 1 with more than one micro-batch per step); accepts the rest.
 * @param saved the checkpoint's recorded order; undefined means written before orders were recorded (1).
 * @param microBatches micro-batches per step of the saved run (gradAccum, or the plan's microBatches).
 * @param what the checkpoint's name, for the message.
 * @throws Error naming the two orders, why they differ and what to do.
 */
export function checkBatchOrder(saved: number | undefined, microBatches: number, what: string): void {
  const order = saved ?? 1;
  if (order === BATCH_ORDER || (order === 1 && microBatches === 1)) return;
  throw new Error(
    `${what} was written under batch order ${order}${
      saved === undefined ? ' (before batch orders were recorded)' : ''
    }, ` +
      `this build draws batch order ${BATCH_ORDER}: with ${microBatches} micro-batches per step the two draw ` +
      `different rows for the same step (order 1 seeded each micro-batch on its own, order ${BATCH_ORDER} draws the ` +
      `global batch from one generator), so the resumed run would not continue the saved one. Resume it with the ` +
      `build that wrote it, or start a new run (--init-from the checkpoint keeps its weights)`,
  );
}

/**
 * Rows [from, to) of a step's global batch that micro-batch `micro` of `b` rows gives to
 * data-parallel rank `rank` of `dp`: [micro·b + rank·b/dp, micro·b + (rank+1)·b/dp).
 * @throws Error when b is not divisible by dp or an index is out of range.
 */
export function microBatchRows(micro: number, b: number, rank = 0, dp = 1): { from: number; to: number } {
  if (!Number.isInteger(b) || b < 1 || !Number.isInteger(dp) || dp < 1 || b % dp) {
    throw new Error(`microBatchRows: ${b} rows per micro-batch must be a positive multiple of dp ${dp}`);
  }
  if (!Number.isInteger(micro) || micro < 0 || !Number.isInteger(rank) || rank < 0 || rank >= dp) {
    throw new Error(`microBatchRows: micro-batch ${micro} must be an integer ≥ 0 and rank ${rank} in 0 … ${dp - 1}`);
  }
  const from = micro * b + rank * (b / dp);
  return { from, to: from + b / dp };
}

/** Checks a row range of {@link TextDataset.rows}. @throws Error naming the range and what is allowed. */
export function checkRowRange(from: number, to: number): void {
  if (!Number.isInteger(from) || !Number.isInteger(to) || from < 0 || to < from) {
    throw new Error(`rows [${from}, ${to}): expected whole numbers with 0 ≤ from ≤ to`);
  }
}

export class TextDataset {
  readonly train: Int32Array;
  readonly val: Int32Array;

  /**
   * @param tokens the whole corpus as token ids.
   * @param blockSize T; each split must hold at least T + 1 tokens.
   * @param valFraction share of the tail kept for validation (nanoGPT: 0.1).
   * @throws Error saying how many tokens the corpus has and how many it needs.
   */
  constructor(tokens: Int32Array, readonly blockSize: number, valFraction = 0.1, readonly name = 'data') {
    const nVal = Math.floor(tokens.length * valFraction);
    this.train = tokens.subarray(0, tokens.length - nVal);
    this.val = tokens.subarray(tokens.length - nVal);
    const need = blockSize + 1;
    const minTotal = Math.ceil(need / Math.min(valFraction, 1 - valFraction));
    if (this.train.length < need || this.val.length < need) {
      throw new Error(
        `${name} has ${tokens.length} tokens: too short for block size ${blockSize} with a ${
          Math.round((1 - valFraction) * 100)
        }/${Math.round(valFraction * 100)} split (need at least ${minTotal})`,
      );
    }
  }

  /**
   * Rows [from, to) of the batch drawn by the generator (seed, split, step, stream): windows of
   * T + 1 tokens whose offsets are that generator's draws in row order. The offsets of rows
   * before `from` are drawn and skipped (cheap); only the rows asked for are copied. Training
   * uses stream 0 (the step's global batch, module doc); evaluation one stream per eval batch.
   * x, y (to − from, T).
   * @throws Error for a row range that is not 0 ≤ from ≤ to.
   */
  rows(split: Split, t: number, seed: number, step: number, from: number, to: number, stream = 0): Batch {
    checkRowRange(from, to);
    const rng = new Random(mixSeed(seed, SPLIT_ID[split], step, stream));
    for (let i = 0; i < from; i++) this.offset(split, rng, t);
    const x = new Int32Array((to - from) * t);
    const y = new Int32Array((to - from) * t);
    for (let i = 0; i < to - from; i++) this.window(split, rng, t, x, y, i);
    return { x, y };
  }

  /** The first B rows of generator (seed, split, step, stream): {@link rows} [0, b). x, y (B, T). */
  batch(split: Split, b: number, t: number, seed: number, step: number, stream = 0): Batch {
    return this.rows(split, t, seed, step, 0, b, stream);
  }

  /** Draws the offset of one window of T + 1 tokens of `split` from `rng` (one draw). */
  offset(split: Split, rng: Random, t: number): number {
    return rng.int((split === 'train' ? this.train : this.val).length - t);
  }

  /**
   * Copies one window of T + 1 tokens of `split`, at an offset drawn from `rng`, into row `row`
   * of x and y (both (B, T)). Shared with the mixture sampler so a one-file mixture draws
   * exactly this class's batches.
   */
  window(split: Split, rng: Random, t: number, x: Int32Array, y: Int32Array, row: number): void {
    const data = split === 'train' ? this.train : this.val;
    const off = this.offset(split, rng, t);
    x.set(data.subarray(off, off + t), row * t);
    y.set(data.subarray(off + 1, off + t + 1), row * t);
  }
}
