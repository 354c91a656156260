/**
 * The `--arch` names. Kept apart from registry.ts (which needs the config type) so the config
 * schema can list them without an import cycle; registry.ts must give a factory for each.
 */
export const ARCH_NAMES = ['gpt', 'linear', 'mamba', 'hybrid', 'gpt-moe'] as const;

export type ArchName = (typeof ARCH_NAMES)[number];
