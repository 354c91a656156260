/**
 * ZeRO stages 1–3 (docs/design.md#zero) as a gradient-sync mode of the mesh trainer: the sync itself
 * (zero_sync.ts), where each bucket is reduced (zero_groups.ts), a rank's pieces of each bucket (zero_pieces.ts) and the
 * working memory of gathered weights and unreduced gradients (zero_units.ts).
 */
export * from './zero_groups.ts';
export * from './zero_pieces.ts';
export * from './zero_sync.ts';
export * from './zero_units.ts';
