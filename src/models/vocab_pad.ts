/**
 * `--pad-vocab N` (nanoGPT pads GPT-2's 50 257 to 50 304; Megatron's
 * --make-vocab-size-divisible-by): the token embedding and the tied LM head get
 * V' = ⌈V/N⌉·N rows so the head's GEMM fills whole tiles (`npm run plan -- --advise`).
 *
 * The padded ids never occur in data. Their rows are initialised to zero without drawing from
 * the weight RNG, so every other weight equals the unpadded model's; their logits are left out
 * of the softmax (kernels/cross_entropy.ts `cols`, as the vocab-parallel cross-entropy leaves
 * out the tp padding) and of sampling, so they get no gradient and stay zero: a padded run
 * trains exactly as the unpadded one, only on wider GEMMs.
 *
 * Under tensor parallelism the multiple is N·tp (Megatron's rule), so every rank's slice of
 * V'/tp rows is itself a multiple of N; N = 1 leaves the model at V and the tp layer pads to
 * a multiple of tp on its own (src/parallel/tensor/vocab_parallel.ts).
 */
import type { Init } from '../nn/params.ts';

/** The training-config knob this module reads (src/train/config.ts `padVocab`). */
export interface VocabPadding {
  padVocab: number;
}

/**
 * Rows V' of the embedding for a tokenizer of `vocab` ids: V when `padVocab` is 1, else V
 * rounded up to a multiple of padVocab·tp.
 * @throws Error when vocab, padVocab or tp is not a positive integer.
 */
export function paddedVocabSize(vocab: number, padVocab: number, tp = 1): number {
  for (const [k, x] of [['vocabulary', vocab], ['--pad-vocab', padVocab], ['tp', tp]] as const) {
    if (!Number.isInteger(x) || x < 1) throw new Error(`paddedVocabSize: ${k} must be a positive integer, got ${x}`);
  }
  if (padVocab === 1) return vocab;
  const m = padVocab * tp;
  return Math.ceil(vocab / m) * m;
}

/**
 * The vocabulary fields of a model shape (models/model.ts ModelShape): `vocabSize` = V' rows and,
 * when padded, `realVocab` = V.
 */
export function vocabShape(cfg: VocabPadding, vocab: number, tp = 1): { vocabSize: number; realVocab?: number } {
  const rows = paddedVocabSize(vocab, cfg.padVocab, tp);
  return rows === vocab ? { vocabSize: vocab } : { vocabSize: rows, realVocab: vocab };
}

/**
 * The config a tensor-parallel rank builds its model from: padVocab N > 1 becomes N·tp (see the
 * module doc), so the registry's {@link vocabShape} gives the tp multiple; N = 1 is unchanged.
 */
export function tpVocabConfig<T extends VocabPadding>(cfg: T, tp: number): T {
  return cfg.padVocab > 1 && tp > 1 ? { ...cfg, padVocab: cfg.padVocab * tp } : cfg;
}

/**
 * Init of a (rows, C) embedding whose first `real` rows are N(0, std) and the rest (padding)
 * zero; only real·C values are drawn, so the RNG stream is the unpadded model's.
 */
export function embeddingInit(std: number, real: number, c: number): Init {
  return { kind: 'normal', std, drawn: real * c };
}
