/**
 * The `--arch` names. Kept apart from registry.ts (which needs the config type) so the config
 * schema can list them without an import cycle; registry.ts must give a factory for each.
 */
export const ARCH_NAMES = ['gpt', 'linear', 'mamba', 'hybrid', 'gpt-moe', 'mamba-moe', 'recurrent-depth'] as const;

/** The architectures with mixture-of-experts layers (the ones `--ep` can split). */
export const MOE_ARCHS: readonly ArchName[] = ['gpt-moe', 'mamba-moe'];

/** The architectures with softmax attention layers (what `--topk-attention` applies to). */
export const ATTENTION_ARCHS: readonly ArchName[] = ['gpt', 'gpt-moe', 'hybrid', 'recurrent-depth'];

export type ArchName = (typeof ARCH_NAMES)[number];

/**
 * The blocks a pipeline splits into stages (the layered model's pieces, docs/design.md#one-model-many-contexts):
 * nLayer, except recurrent-depth's P + 1 + Q — its core, all r iterations of it, is one piece.
 */
export function pipelineBlocks(
  cfg: { arch: string; nLayer: number; preludeLayers: number; codaLayers: number },
): number {
  return cfg.arch === 'recurrent-depth' ? cfg.preludeLayers + 1 + cfg.codaLayers : cfg.nLayer;
}
