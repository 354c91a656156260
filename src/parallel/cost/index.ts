/**
 * The analytical communication of a plan that a rank reports beside what it measured
 * (docs/design.md#communication-per-optimizer-step): the per-step traffic rows (cost.ts, cost_types.ts), the parameter
 * layout of the architectures other than GPT (arch_params.ts), the rows under compression (compressed_rows.ts) and a
 * rank's measured and predicted traffic by dimension (rank_traffic.ts). It stays in src/parallel because every rank
 * computes its prediction at run time (run.ts RankRun.summary); the performance model (src/perf) reads it from above.
 */
export * from './arch_params.ts';
export * from './compressed_rows.ts';
export * from './cost.ts';
export * from './cost_types.ts';
export * from './rank_traffic.ts';
