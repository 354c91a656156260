/**
 * `--arch` → model constructor. Every entry trains from the same CLI, worker and browser form;
 * the config schema's `arch` enum is this table's keys, so an unknown name fails validation.
 */
import type { Gpu } from '../gpu/context.ts';
import { GPT, type GPTConfig, gptParamSpecs, gptPieceOf } from './gpt.ts';
import { type LinearConfig, LinearLM, linearParamSpecs, linearPieceOf } from './linear.ts';
import { Mamba, mambaParamSpecs, mambaPieceOf } from './mamba.ts';
import type { ParamSpec, Placement } from '../nn/params.ts';
import { Hybrid, type HybridConfig, hybridSharedSpecs } from './hybrid.ts';
import { GPTMoE, moeParamSpecs } from './moe.ts';
import { MambaMoE, mambaMoEParamSpecs } from './mamba_moe.ts';
import type { ExpertShard, MoEConfig } from './moe_specs.ts';
import type { MoELanguageModel } from './moe_layer.ts';
import type { LanguageModel, Piece } from './model.ts';
import { ARCH_NAMES, type ArchName, MOE_ARCHS, pipelineBlocks } from './archs.ts';
import { type VocabPadding, vocabShape } from './vocab_pad.ts';
import { RecurrentDepth, type RecurrentDepthConfig, recurrentDepthParamSpecs } from './recurrent_depth.ts';
import { type ArchEntry, registerArch as register, registeredArch } from './arch_hooks.ts';

export { ARCH_NAMES, type ArchName, MOE_ARCHS, pipelineBlocks };

/**
 * The keys of a training config (train/config.ts TrainConfig, which has them all) that the
 * registry reads, typed by each model's own config: declared here so that models need not import
 * the training layer (docs/design.md#layers).
 */
export interface ModelConfig
  extends
    VocabPadding,
    Pick<GPTConfig, 'nLayer' | 'nHead' | 'nEmbd' | 'blockSize' | 'bias'>,
    Pick<HybridConfig, 'dState' | 'expand' | 'dConv' | 'attnEvery'>,
    Pick<MoEConfig, 'nExpert' | 'capacityFactor' | 'auxLossWeight' | 'moeEvery'>,
    Pick<
      RecurrentDepthConfig,
      'preludeLayers' | 'codaLayers' | 'recurIters' | 'recurBackprop' | 'recurInject' | 'evalIterations'
    > {
  arch: ArchName;
  attention: NonNullable<GPTConfig['attention']>;
  linearDecay: LinearConfig['decay'];
  moeTopK: MoEConfig['topK'];
  /** Default weight seed. */
  seed: number;
}

/**
 * Builds one architecture from a validated training config and the tokenizer's vocabulary size
 * (padded to `cfg.padVocab`'s multiple: models/vocab_pad.ts); with `place`, only a rank's shards of the parameters it holds (layered models only).
 */
export type ModelFactory = (
  gpu: Gpu,
  cfg: ModelConfig,
  vocabSize: number,
  seed: number,
  place?: Placement,
) => LanguageModel;

/** Architectures by `--arch` name; the Record type makes a missing one a compile error. */
export const ARCHS: Record<ArchName, ModelFactory> = {
  gpt: (gpu, cfg, vocabSize, seed, place) => new GPT(gpu, gptShape(cfg, vocabSize), seed, place),
  linear: (gpu, cfg, vocabSize, seed, place) =>
    new LinearLM(
      gpu,
      {
        ...vocabShape(cfg, vocabSize),
        blockSize: cfg.blockSize,
        nLayer: cfg.nLayer,
        nHead: cfg.nHead,
        nEmbd: cfg.nEmbd,
        decay: cfg.linearDecay,
      },
      seed,
      place,
    ),
  mamba: (gpu, cfg, vocabSize, seed, place) => new Mamba(gpu, mambaShape(cfg, vocabSize), seed, undefined, place),
  hybrid: (gpu, cfg, vocabSize, seed, place) =>
    new Hybrid(gpu, { ...mambaShape(cfg, vocabSize), nHead: cfg.nHead, attnEvery: cfg.attnEvery }, seed, place),
  'gpt-moe': (gpu, cfg, vocabSize, seed, place) => createMoEModel(gpu, cfg, vocabSize, { seed, place }),
  'mamba-moe': (gpu, cfg, vocabSize, seed, place) => createMoEModel(gpu, cfg, vocabSize, { seed, place }),
  'recurrent-depth': (gpu, cfg, vocabSize, seed, place) =>
    new RecurrentDepth(gpu, recurrentDepthShape(cfg, vocabSize), seed, place),
};

/**
 * The piece (block index, embedding, head) that uses each parameter, per layered architecture:
 * what a pipeline stage's parameter placement reads. The MoE models are GPT's / Mamba's pieces
 * (their experts and router belong to their block; expert parallelism places the experts).
 */
export const PIECES: Record<ArchName, (name: string) => Piece> = {
  gpt: gptPieceOf,
  linear: linearPieceOf,
  mamba: mambaPieceOf,
  hybrid: mambaPieceOf,
  'gpt-moe': gptPieceOf,
  'mamba-moe': mambaPieceOf,
  // Its core's weights are named under the core's piece index (recurrent_depth.ts), as blocks are.
  'recurrent-depth': gptPieceOf,
};

/**
 * Adds an architecture beside the built-in ones (arch_hooks.ts): its model and split declaration.
 * @throws Error when the name is taken or malformed.
 */
export const registerArch = (name: string, entry: ArchEntry): void => register(name, entry, ARCH_NAMES);

/**
 * The piece map of architecture `arch`, built-in or registered.
 * @throws Error naming the known architectures for an unknown one.
 */
export function piecesOf(arch: string): (name: string) => Piece {
  const f = (PIECES as Record<string, ((name: string) => Piece) | undefined>)[arch] ?? registeredArch(arch)?.pieceOf;
  if (!f) throw new Error(`unknown arch '${arch}'; allowed: ${ARCH_NAMES.join(', ')} or a registered one`);
  return f;
}

function gptShape(cfg: ModelConfig, vocabSize: number) {
  return {
    ...vocabShape(cfg, vocabSize),
    blockSize: cfg.blockSize,
    nLayer: cfg.nLayer,
    nHead: cfg.nHead,
    nEmbd: cfg.nEmbd,
    bias: cfg.bias,
    attention: cfg.attention,
  };
}

/** A recurrent-depth model's shape: GPT's plus the recurrence; evaluation r 0 means r̄. */
export function recurrentDepthShape(cfg: ModelConfig, vocabSize: number): RecurrentDepthConfig {
  return {
    ...gptShape(cfg, vocabSize),
    preludeLayers: cfg.preludeLayers,
    codaLayers: cfg.codaLayers,
    recurIters: cfg.recurIters,
    recurBackprop: cfg.recurBackprop,
    recurInject: cfg.recurInject,
    evalIterations: cfg.evalIterations || cfg.recurIters,
  };
}

function mambaShape(cfg: ModelConfig, vocabSize: number) {
  return {
    ...vocabShape(cfg, vocabSize),
    blockSize: cfg.blockSize,
    nLayer: cfg.nLayer,
    nEmbd: cfg.nEmbd,
    dState: cfg.dState,
    expand: cfg.expand,
    dConv: cfg.dConv,
  };
}

/**
 * The parameter declarations of a layered architecture, host-side (no device): what a rank's
 * placement and the planner count (every expert of the MoE models).
 */
export function paramSpecsOf(cfg: ModelConfig, vocabSize: number): ParamSpec[] {
  switch (cfg.arch) {
    case 'gpt':
      return gptParamSpecs(gptShape(cfg, vocabSize));
    case 'linear':
      return linearParamSpecs({
        ...vocabShape(cfg, vocabSize),
        blockSize: cfg.blockSize,
        nLayer: cfg.nLayer,
        nHead: cfg.nHead,
        nEmbd: cfg.nEmbd,
        decay: cfg.linearDecay,
      }).specs;
    case 'mamba':
      return mambaParamSpecs(mambaShape(cfg, vocabSize)).specs;
    case 'hybrid': {
      const h = { ...mambaShape(cfg, vocabSize), nHead: cfg.nHead, attnEvery: cfg.attnEvery };
      return mambaParamSpecs(h, (s) => hybridSharedSpecs(s, h)).specs;
    }
    case 'gpt-moe':
      return moeParamSpecs(gptShape(cfg, vocabSize), moeConfigOf(cfg));
    case 'mamba-moe':
      return mambaMoEParamSpecs({ ...mambaShape(cfg, vocabSize), bias: cfg.bias }, moeConfigOf(cfg)).specs;
    case 'recurrent-depth':
      return recurrentDepthParamSpecs(recurrentDepthShape(cfg, vocabSize));
  }
}

/**
 * Builds the model `cfg.arch` names with weights drawn from `seed`.
 * @throws Error naming the allowed architectures for an unknown one, or the model's own shape error.
 */
export function createModel(
  gpu: Gpu,
  cfg: ModelConfig,
  vocabSize: number,
  seed = cfg.seed,
  place?: Placement,
): LanguageModel {
  const make = (ARCHS as Record<string, ModelFactory | undefined>)[cfg.arch] ?? registeredArch(cfg.arch)?.create;
  if (!make) throw new Error(`unknown arch '${cfg.arch}'; allowed: ${ARCH_NAMES.join(', ')} or a registered one`);
  return make(gpu, cfg, vocabSize, seed, place);
}

/** The MoE knobs of a training config (nExpert, moeTopK, capacityFactor, auxLossWeight, moeEvery). */
export function moeConfigOf(cfg: ModelConfig): MoEConfig {
  return {
    nExpert: cfg.nExpert,
    topK: cfg.moeTopK,
    capacityFactor: cfg.capacityFactor,
    auxLossWeight: cfg.auxLossWeight,
    moeEvery: cfg.moeEvery,
  };
}

/**
 * Builds the MoE model `cfg.arch` names (gpt-moe or mamba-moe), optionally holding only the
 * experts of `shard` (expert parallelism) or routing in `groups` token groups (the single-rank
 * twin of an expert-parallel run); with `place`, a rank's tensor / pipeline placement of what
 * it keeps (src/parallel/pipeline/stages.ts). Weights come from `seed` (default cfg.seed).
 * @throws Error naming the MoE architectures for any other arch, or the model's own config error.
 */
export function createMoEModel(
  gpu: Gpu,
  cfg: ModelConfig,
  vocabSize: number,
  o: { shard?: ExpertShard; groups?: number; seed?: number; place?: Placement } = {},
): MoELanguageModel {
  const moe = { ...moeConfigOf(cfg), ...(o.groups !== undefined ? { groups: o.groups } : {}) },
    seed = o.seed ?? cfg.seed;
  if (cfg.arch === 'gpt-moe') return new GPTMoE(gpu, gptShape(cfg, vocabSize), moe, seed, o.shard, o.place);
  if (cfg.arch === 'mamba-moe') {
    return new MambaMoE(gpu, { ...mambaShape(cfg, vocabSize), bias: cfg.bias }, moe, seed, o.shard, o.place);
  }
  throw new Error(`arch '${cfg.arch}' has no mixture-of-experts layers; allowed: ${MOE_ARCHS.join(', ')}`);
}
