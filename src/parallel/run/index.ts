/**
 * A parallel run end to end (docs/design.md#parallel-training): what each rank of a world does (run.ts) with the
 * trainer behind it (run_build.ts), the tasks a rank worker serves (run_tasks.ts), the host that drives them
 * (run_host.ts), checked checkpoints (run_save.ts) of per-rank files (rank_checkpoint.ts) and the stop request shared by
 * host and ranks (step_stop.ts).
 */
export * from './rank_checkpoint.ts';
export * from './run.ts';
export * from './run_build.ts';
export * from './run_host.ts';
export * from './run_save.ts';
export * from './run_tasks.ts';
export * from './step_stop.ts';
