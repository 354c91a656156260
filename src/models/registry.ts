/**
 * `--arch` → model constructor. Every entry trains from the same CLI, worker and browser form;
 * the config schema's `arch` enum is this table's keys, so an unknown name fails validation.
 */
import type { Gpu } from '../gpu/context.ts';
import type { TrainConfig } from '../train/config.ts';
import { GPT } from './gpt.ts';
import type { LanguageModel } from './model.ts';
import { ARCH_NAMES, type ArchName } from './archs.ts';

export { ARCH_NAMES, type ArchName };

/** Builds one architecture from a validated training config and the tokenizer's vocabulary size. */
export type ModelFactory = (gpu: Gpu, cfg: TrainConfig, vocabSize: number, seed: number) => LanguageModel;

/** Architectures by `--arch` name; the Record type makes a missing one a compile error. */
export const ARCHS: Record<ArchName, ModelFactory> = {
  gpt: (gpu, cfg, vocabSize, seed) =>
    new GPT(gpu, {
      vocabSize,
      blockSize: cfg.blockSize,
      nLayer: cfg.nLayer,
      nHead: cfg.nHead,
      nEmbd: cfg.nEmbd,
      bias: cfg.bias,
      attention: cfg.attention,
    }, seed),
};

/**
 * Builds the model `cfg.arch` names with weights drawn from `seed`.
 * @throws Error naming the allowed architectures for an unknown one, or the model's own shape error.
 */
export function createModel(gpu: Gpu, cfg: TrainConfig, vocabSize: number, seed = cfg.seed): LanguageModel {
  const make = (ARCHS as Record<string, ModelFactory | undefined>)[cfg.arch];
  if (!make) throw new Error(`unknown arch '${cfg.arch}'; allowed: ${ARCH_NAMES.join(', ')}`);
  return make(gpu, cfg, vocabSize, seed);
}
