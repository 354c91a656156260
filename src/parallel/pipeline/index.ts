/**
 * Pipeline parallelism (docs/design.md#pipeline-parallelism): the rules (pipeline.ts), schedules as data
 * (pipeline_schedule.ts), their simulated clock and predicted timeline (pipeline_sim.ts), the executor that runs one
 * rank's program (pipeline_executor.ts), the cut of a layered model into stages (pipeline_stage.ts) and one rank's
 * stages of any model (stages.ts).
 */
export * from './pipeline.ts';
export * from './pipeline_executor.ts';
export * from './pipeline_schedule.ts';
export * from './pipeline_sim.ts';
export * from './pipeline_stage.ts';
export * from './stages.ts';
