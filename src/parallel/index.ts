/**
 * Parallel training (docs/design.md#parallel-training), one folder per concern, each with an index.ts that re-exports
 * its public API (callers may import the concrete files):
 *
 * - plan/: the ParallelPlan, its checks, flags, process groups and which splits an architecture takes;
 * - tensor/: tensor and sequence parallelism (Megatron-LM's column / row layers, vocab-parallel head);
 * - context/: context parallelism (ring attention, Ulysses);
 * - pipeline/: pipeline schedules, their simulation and executor, a rank's stages;
 * - data/: data parallelism, the gradient sync, gradient compression, low-communication (DiLoCo) sync;
 * - zero/: ZeRO-1/2/3;
 * - expert/: expert parallelism (MoE token exchange and routing);
 * - mesh/: one rank of the [dp, pp, cp, tp] mesh, its trainer, and the order its model is made parallel;
 * - run/: a parallel run end to end: the rank, its worker tasks, the host, checkpoints;
 * - cost/: the analytical traffic a rank predicts for its step, beside what it measures.
 *
 * The performance model over these plans (step time, memory, plan reports) is src/perf, one layer above
 * (docs/design.md#layers).
 */
export * as plan from './plan/index.ts';
export * as tensor from './tensor/index.ts';
export * as context from './context/index.ts';
export * as pipeline from './pipeline/index.ts';
export * as data from './data/index.ts';
export * as zero from './zero/index.ts';
export * as expert from './expert/index.ts';
export * as mesh from './mesh/index.ts';
export * as run from './run/index.ts';
export * as cost from './cost/index.ts';
