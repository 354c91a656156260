/**
 * The accounting of a plan that a rank reports beside what it measured (docs/design.md#accounting-derived-from-the-model):
 * parameters and per-step traffic counted from the model over the meta GPU (derived_params.ts, derived_traffic.ts,
 * derived_rows.ts), the closed form of a GPT's traffic for shapes without a config (cost.ts, cost_types.ts), the rows
 * under compression (compressed_rows.ts) and a rank's measured and predicted traffic by dimension (rank_traffic.ts). It stays in src/parallel because every rank
 * computes its prediction at run time (run.ts RankRun.summary); the performance model (src/perf) reads it from above.
 */
export * from './compressed_rows.ts';
export * from './cost.ts';
export * from './cost_types.ts';
export * from './derived_params.ts';
export * from './derived_rows.ts';
export * from './derived_traffic.ts';
export * from './rank_traffic.ts';
