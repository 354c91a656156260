/**
 * Pipeline parallelism (docs/design.md#pipeline-parallelism): schedules as data (pipeline_schedule.ts), their
 * simulated clock and predicted timeline (pipeline_sim.ts), the executor that runs one rank's program
 * (pipeline_executor.ts), the cut of a layered model into stages (pipeline_stage.ts) and one rank's stages of any model
 * (stages.ts). Its rules are entries of the plan's one table (plan/rule_table.ts).
 */
export * from './pipeline_executor.ts';
export * from './pipeline_schedule.ts';
export * from './pipeline_sim.ts';
export * from './pipeline_stage.ts';
export * from './stages.ts';
export * from './zero_bubble.ts';
