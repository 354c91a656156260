/**
 * A tokenised corpus split 90/10 into train and validation, with batches that are a pure
 * function of (seed, split, step, micro-batch): the batch a run trained on at any step can
 * be rebuilt without replaying the run (as Pythia's data loader allows), and a resumed run
 * sees exactly the batches an uninterrupted one would.
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
   * The batch for (seed, split, step, micro): B windows of T + 1 tokens at offsets drawn
   * from a generator seeded by those four numbers.
   */
  batch(split: Split, b: number, t: number, seed: number, step: number, micro = 0): Batch {
    const rng = new Random(mixSeed(seed, SPLIT_ID[split], step, micro));
    const x = new Int32Array(b * t);
    const y = new Int32Array(b * t);
    for (let i = 0; i < b; i++) this.window(split, rng, t, x, y, i);
    return { x, y };
  }

  /**
   * Copies one window of T + 1 tokens of `split`, at an offset drawn from `rng`, into row `row`
   * of x and y (both (B, T)). Shared with the mixture sampler so a one-file mixture draws
   * exactly this class's batches.
   */
  window(split: Split, rng: Random, t: number, x: Int32Array, y: Int32Array, row: number): void {
    const data = split === 'train' ? this.train : this.val;
    const off = rng.int(data.length - t);
    x.set(data.subarray(off, off + t), row * t);
    y.set(data.subarray(off + 1, off + t + 1), row * t);
  }
}
