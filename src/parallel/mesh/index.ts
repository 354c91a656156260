/**
 * One rank of the [dp, pp, cp, tp] DeviceMesh (docs/design.md#parallel-training): the order its model is made
 * parallel (parallelize.ts), its place, groups and model (rank_model.ts) over its RankContext (rank_context.ts), the
 * trainer of every plan (mesh_trainer.ts), validation over the ranks (mesh_eval.ts), the traffic it measures
 * (traffic.ts) and compute on the simulated clock (sim_compute.ts).
 */
export * from './mesh_eval.ts';
export * from './mesh_trainer.ts';
export * from './parallelize.ts';
export * from './rank_context.ts';
export * from './rank_model.ts';
export * from './sim_compute.ts';
export * from './traffic.ts';
