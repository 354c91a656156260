/**
 * What a parallel run is before it runs (docs/design.md#parallel-strategies): the ParallelPlan — the degrees of dp,
 * tp, pp, cp and ep, ZeRO, micro-batches — its type (plan_type.ts) and its rules (one table: rule_table.ts, run by
 * rules.ts, its limits in limits.ts), the flags' schema (plan_schema.ts), the process
 * groups it makes (plan_groups.ts), which architectures each split applies to (strategy.ts) and what the mesh trainer
 * accepts (mesh_plan.ts).
 */
export * from './limits.ts';
export * from './mesh_plan.ts';
export * from './plan.ts';
export * from './plan_groups.ts';
export * from './plan_schema.ts';
export * from './rules.ts';
export * from './rule_table.ts';
export * from './strategy.ts';
