/**
 * Whether the trainer runs a plan on an architecture (docs/design.md#parallel-strategies): rules.ts's architecture
 * rules, which read splits.ts's table of the architectures each split applies to.
 */
import type { ParallelPlan, StrategyKind } from './plan_type.ts';
import { archRuleProblems } from './rules.ts';

export { SPLIT_ARCHS, splitArchHelp, type SplitDim } from './splits.ts';

/**
 * The architecture rules of rules.ts's table alone (a split `arch` does not take, ep on a dense
 * model), for callers that have no model yet.
 * @throws Error with the first broken rule's message, e.g. "cp 2 does not apply to --arch mamba: …".
 */
export function checkArchSplit(plan: ParallelPlan, arch: string): void {
  const [first] = archRuleProblems(plan, arch);
  if (first) throw new Error(first);
}

/**
 * The trainer for `plan` on `arch`: the mesh trainer (mesh_trainer.ts) runs every plan it
 * accepts — data parallelism alone (DDP's overlapped buckets), any split by pp, cp, tp or ep,
 * ZeRO-1/2/3 as gradient-sync modes (zero_sync.ts) with every one of them.
 * @throws Error from {@link checkArchSplit}.
 */
export function strategyOf(plan: ParallelPlan, arch: string): StrategyKind {
  checkArchSplit(plan, arch);
  return 'mesh';
}
