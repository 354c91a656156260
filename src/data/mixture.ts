/**
 * Weighted mixtures of corpora (`--data a.txt:0.95,b.txt:0.05`), for data mixing and replay in
 * continual pre-training (Ibrahim et al. arXiv 2403.08763 replay 5 % of the old data). Each
 * corpus is split into train/val on its own (its tail is held out), and every sequence of a
 * batch picks its corpus by a seeded draw from the weights. Batches stay a pure function of
 * (seed, split, step), as for one file, and follow its batch order (dataset.ts: one global batch
 * per step, however it is split): the exact data of any step of any run is known from its
 * config, like Pythia's data loader (Biderman et al. arXiv 2304.11158).
 */
import { type Batch, checkRowRange, type Split, SPLIT_ID, TextDataset } from './dataset.ts';
import { mixSeed, Random } from '../util/random.ts';

/** One entry of a data spec: a text file and its share of the training sequences. */
export interface DataSource {
  path: string;
  weight: number;
}

/** Salt of the source-choice stream, so it is independent of the offsets' stream. */
const SOURCE_SALT = 0x4d_49_58_31;
/** How far the weights may be from summing to 1 (decimal specs like 0.95,0.05 are inexact). */
const SUM_TOLERANCE = 1e-6;

/**
 * Parses a data spec: `file` (weight 1) or `file:w,file:w,…` with positive weights summing to
 * 1. A path may itself contain ':' — only the text after the last ':' is read as the weight.
 * @throws Error saying what is malformed and what the allowed form is.
 */
export function parseDataSpec(spec: string): DataSource[] {
  const form = "expected 'file.txt' or 'a.txt:0.95,b.txt:0.05' (positive weights summing to 1)";
  const parts = spec.split(',').map((p) => p.trim());
  if (!spec.trim() || parts.some((p) => !p)) throw new Error(`Invalid data spec '${spec}': empty entry; ${form}`);
  if (parts.length === 1 && !/:[^:/\\]*$/.test(parts[0])) return [{ path: parts[0], weight: 1 }];
  const out = parts.map((p) => {
    const i = p.lastIndexOf(':');
    if (i <= 0) throw new Error(`Invalid data spec '${spec}': '${p}' has no weight; ${form}`);
    const raw = p.slice(i + 1).trim();
    const weight = Number(raw);
    if (raw === '' || !Number.isFinite(weight)) {
      throw new Error(`Invalid data spec '${spec}': weight '${raw}' of '${p.slice(0, i)}' is not a number; ${form}`);
    }
    if (weight <= 0) {
      throw new Error(`Invalid data spec '${spec}': weight ${weight} of '${p.slice(0, i)}' must be positive; ${form}`);
    }
    return { path: p.slice(0, i).trim(), weight };
  });
  const seen = new Set<string>();
  for (const s of out) {
    if (seen.has(s.path)) {
      throw new Error(`Invalid data spec '${spec}': '${s.path}' is listed twice; give it one weight`);
    }
    seen.add(s.path);
  }
  const sum = out.reduce((a, s) => a + s.weight, 0);
  if (Math.abs(sum - 1) > SUM_TOLERANCE) {
    throw new Error(`Invalid data spec '${spec}': weights sum to ${sum}, not 1; ${form}`);
  }
  return out;
}

/** Formats sources back into a spec string (the inverse of {@link parseDataSpec}). */
export function formatDataSpec(sources: DataSource[]): string {
  return sources.length === 1 && sources[0].weight === 1
    ? sources[0].path
    : sources.map((s) => `${s.path}:${s.weight}`).join(',');
}

/** One batch of a mixture: x, y (B, T) and the corpus index of each row (B). */
export interface MixtureBatch extends Batch {
  source: Int32Array;
}

export class MixtureDataset {
  /** Cumulative weights, for the inverse-CDF draw of each row's corpus. */
  private readonly cdf: number[];

  /**
   * @param sources one dataset per corpus (each already split into train/val).
   * @param weights the share of rows drawn from each; positive, summing to 1.
   * @param names labels for logs and per-corpus metrics (usually the file paths).
   * @throws Error when the counts differ or a weight is not positive.
   */
  constructor(readonly sources: TextDataset[], readonly weights: number[], readonly names: string[]) {
    if (!sources.length || sources.length !== weights.length || names.length !== sources.length) {
      throw new Error(
        `MixtureDataset: ${sources.length} sources, ${weights.length} weights and ${names.length} names must match and be ≥ 1`,
      );
    }
    if (weights.some((w) => !(w > 0))) {
      throw new Error(`MixtureDataset: weights must be positive, got ${weights.join(', ')}`);
    }
    let acc = 0;
    const total = weights.reduce((a, w) => a + w, 0);
    this.cdf = weights.map((w) => (acc += w / total));
  }

  /**
   * The mixture of tokenised corpora, each split `valFraction` from its tail.
   * @throws Error (from TextDataset) naming a corpus too short for the block size.
   */
  static fromTokens(
    corpora: { name: string; tokens: Int32Array; weight: number }[],
    blockSize: number,
    valFraction = 0.1,
  ): MixtureDataset {
    return new MixtureDataset(
      corpora.map((c) => new TextDataset(c.tokens, blockSize, valFraction, c.name)),
      corpora.map((c) => c.weight),
      corpora.map((c) => c.name),
    );
  }

  /** Training tokens of every corpus together (for the size line the CLI prints). */
  get trainTokens(): number {
    return this.sources.reduce((a, s) => a + s.train.length, 0);
  }

  get valTokens(): number {
    return this.sources.reduce((a, s) => a + s.val.length, 0);
  }

  /** The corpus of the next row: an inverse-CDF draw from the source-choice generator. */
  private pick(rng: Random): number {
    if (this.sources.length === 1) return 0;
    const u = rng.uniform();
    const k = this.cdf.findIndex((c) => u < c);
    return k < 0 ? this.cdf.length - 1 : k;
  }

  /**
   * Rows [from, to) of the batch of (seed, split, step, stream), as TextDataset.rows draws them:
   * row by row, the corpus from the weights (a generator of its own), then a window of T + 1
   * tokens of that corpus's `split` from the offsets' generator. The rows before `from` are
   * drawn and skipped, not copied. With one corpus this is exactly {@link TextDataset.rows}.
   * x, y (to − from, T); source (to − from).
   * @throws Error for a row range that is not 0 ≤ from ≤ to.
   */
  rows(split: Split, t: number, seed: number, step: number, from: number, to: number, stream = 0): MixtureBatch {
    checkRowRange(from, to);
    const rng = new Random(mixSeed(seed, SPLIT_ID[split], step, stream));
    const srcRng = new Random(mixSeed(seed, SPLIT_ID[split], step, stream, SOURCE_SALT));
    for (let i = 0; i < from; i++) this.sources[this.pick(srcRng)].offset(split, rng, t);
    const x = new Int32Array((to - from) * t);
    const y = new Int32Array((to - from) * t);
    const source = new Int32Array(to - from);
    for (let i = 0; i < to - from; i++) {
      source[i] = this.pick(srcRng);
      this.sources[source[i]].window(split, rng, t, x, y, i);
    }
    return { x, y, source };
  }

  /** The first B rows of (seed, split, step, stream): {@link rows} [0, b). x, y (B, T); source (B). */
  batch(split: Split, b: number, t: number, seed: number, step: number, stream = 0): MixtureBatch {
    return this.rows(split, t, seed, step, 0, b, stream);
  }

  /** A description for the run directory (data.json): what each corpus holds and its weight. */
  describe(): { name: string; weight: number; trainTokens: number; valTokens: number }[] {
    return this.sources.map((s, i) => ({
      name: this.names[i],
      weight: this.weights[i],
      trainTokens: s.train.length,
      valTokens: s.val.length,
    }));
  }
}
