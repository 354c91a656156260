/**
 * Whether the trainer runs a plan on an architecture, and which architectures each split applies
 * to (docs/design.md#parallel-strategies and docs/design.md#one-model-many-contexts): the rules between a plan and a
 * model that no single dimension's validation sees.
 */
import type { ParallelPlan, StrategyKind } from './plan.ts';
import { MOE_ARCHS } from '../../models/archs.ts';

/**
 * Which architecture each split applies to (docs/design.md#one-model-many-contexts), as one rule per dimension:
 * - tp: the architectures tp_table.ts covers — gpt, mamba (Mamba-2's split of the inner
 *   channels), hybrid, linear (its heads; ln_x is a per-head norm, so it splits with them), the
 *   MoE models (their attention / mixer split, router and experts whole on every tp rank), and
 *   recurrent-depth (GPT blocks; the adapter whole on every rank).
 * - sp: gpt, mamba, hybrid, linear (its token shift reads the row before a shard's first from the
 *   previous rank, sp_shift.ts), the MoE models (each tp rank routes its rows as one token group
 *   through the replicated experts, whose gradients are then summed over tp as the norms' are),
 *   recurrent-depth.
 * - pp: every architecture — gpt, linear, mamba, hybrid (its shared attention block is held by
 *   every stage and its gradient summed over the pp group), gpt-moe, mamba-moe, recurrent-depth
 *   (over its P + 1 + Q pieces: the core with all its iterations is one, models/archs.ts pipelineBlocks).
 * - cp: gpt and recurrent-depth (attention is their only sequence mixer; recurrent depth's runs
 *   once per core iteration); the recurrent mixers would need the chunk-boundary state passed
 *   along the ring (a sequence-parallel scan), which is not built.
 * @throws Error naming the dimension, the architecture and the rule.
 */
export function checkArchSplit(plan: ParallelPlan, arch: string): void {
  const rules: [keyof ParallelPlan, readonly string[], string][] = [
    [
      'tp',
      ['gpt', 'mamba', 'hybrid', 'linear', 'gpt-moe', 'mamba-moe', 'recurrent-depth'],
      'tensor parallelism splits the architectures tp_table.ts covers',
    ],
    [
      'sp',
      ['gpt', 'mamba', 'hybrid', 'linear', 'gpt-moe', 'mamba-moe', 'recurrent-depth'],
      "sequence parallelism shards the residual stream's tokens",
    ],
    [
      'pp',
      ['gpt', 'linear', 'mamba', 'hybrid', 'gpt-moe', 'mamba-moe', 'recurrent-depth'],
      'pipeline stages split the architectures written as pieces',
    ],
    [
      'cp',
      ['gpt', 'recurrent-depth'],
      'context parallelism splits attention only; the recurrent mixers would need a sequence-parallel scan',
    ],
  ];
  for (const [dim, archs, why] of rules) {
    const on = plan[dim] === true || (plan[dim] as number) > 1, what = plan[dim] === true ? dim : `${dim} ${plan[dim]}`;
    if (on && !archs.includes(arch)) {
      throw new Error(`${what} does not apply to --arch ${arch}: ${why} (allowed: ${archs.join(', ')})`);
    }
  }
}

/**
 * The trainer for `plan` on `arch`: the mesh trainer (mesh_trainer.ts) runs every plan it
 * accepts — data parallelism alone (DDP's overlapped buckets), any split by pp, cp, tp or ep,
 * ZeRO-1/2/3 as gradient-sync modes (zero_sync.ts) with every one of them — so this is the
 * up-front check that it does.
 * @throws Error for ep on a dense architecture, or from {@link checkArchSplit}.
 */
export function strategyOf(plan: ParallelPlan, arch: string): StrategyKind {
  checkArchSplit(plan, arch);
  if (plan.ep > 1) checkExperts(plan, arch);
  return 'mesh';
}

/**
 * Expert parallelism needs a MoE architecture (ep < dp is DeepSpeed-MoE's layout, experts
 * replicated over the dp/ep groups, which ZeRO shards them over: zero_groups.ts).
 * @throws Error naming the rule.
 */
function checkExperts(plan: ParallelPlan, arch: string): void {
  if (!(MOE_ARCHS as readonly string[]).includes(arch)) {
    throw new Error(`ep ${plan.ep} needs --arch gpt-moe or mamba-moe, got ${arch}`);
  }
}
