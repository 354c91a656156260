/**
 * Which trainer runs a plan, and which architectures each split applies to (docs/design.md §16,
 * §23): the rules between a plan and a model that no single dimension's validation sees.
 */
import type { ParallelPlan, StrategyKind } from './plan.ts';
import { checkZeroSplit } from './zero_split.ts';

/**
 * Which architecture each split applies to (docs/design.md §23), as one rule per dimension:
 * - tp: the architectures tp_table.ts covers — gpt, mamba (Mamba-2's split of the inner
 *   channels), hybrid, linear (its heads; ln_x is a per-head norm, so it splits with them); not
 *   the MoE models (their forward is not written as pieces yet).
 * - sp: gpt, mamba, hybrid. Not linear: its token shift runs on the residual side, before any
 *   gather, and reads each token's predecessor, which for the first token of a sequence shard
 *   sits on the previous rank.
 * - pp: the layered architectures — gpt, linear, mamba, hybrid (its shared attention block is
 *   held by every stage and its gradient summed over the pp group); not the MoE models.
 * - cp: gpt only; the recurrent mixers would need the chunk-boundary state passed along the ring
 *   (a sequence-parallel scan), which is not built.
 * @throws Error naming the dimension, the architecture and the rule.
 */
export function checkArchSplit(plan: ParallelPlan, arch: string): void {
  const rules: [keyof ParallelPlan, readonly string[], string][] = [
    [
      'tp',
      ['gpt', 'mamba', 'hybrid', 'linear'],
      'tensor parallelism splits gpt, mamba (inner channels), hybrid and linear (heads); not the MoE models yet',
    ],
    [
      'sp',
      ['gpt', 'mamba', 'hybrid'],
      "sequence parallelism shards the residual stream's tokens, and linear's token shift needs each token's " +
      'predecessor from the previous shard; linear takes tp without --sp',
    ],
    [
      'pp',
      ['gpt', 'linear', 'mamba', 'hybrid'],
      'pipeline stages split the architectures written as pieces; the MoE models are not yet',
    ],
    [
      'cp',
      ['gpt'],
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
 * The trainer for `plan`: the mesh trainer (mesh_trainer.ts) whenever the model is split — any
 * of pp, cp, tp > 1, with dp and ZeRO-1 —; zero (zero.ts) for ZeRO-1/2/3 over dp and for
 * ZeRO-2/3 over a tp / cp split (zero_split.ts); else dp (ZeRO 0) or ep.
 * @throws Error "not supported yet: …" for ep with a split model, ZeRO-2/3 with pp or sp
 *   (zero_split.ts checkZeroSplit), or from {@link checkArchSplit}.
 */
export function strategyOf(plan: ParallelPlan, arch: string): StrategyKind {
  if (plan.ep <= 1) checkArchSplit(plan, arch);
  const split = (['pp', 'cp', 'tp'] as const).filter((k) => plan[k] > 1);
  if (split.length) {
    if (plan.ep > 1) {
      const dims = (['dp', 'pp', 'cp', 'tp'] as const).filter((k) => plan[k] > 1).map((k) => `${k} ${plan[k]}`);
      throw new Error(
        `not supported yet: ep ${plan.ep} combined with ${
          dims.join(' × ')
        } (expert parallelism runs with dp only; the mesh trainer composes dp × pp × cp × tp (+sp) with ZeRO)`,
      );
    }
    if (plan.zero < 2) return 'mesh';
    checkZeroSplit(plan);
    return 'zero';
  }
  if (plan.ep > 1) {
    // ep < dp is DeepSpeed-MoE's layout (experts replicated over dp/ep groups); ZeRO over it is not built.
    if (plan.zero) {
      throw new Error(
        `not supported yet: zero ${plan.zero} combined with ep ${plan.ep} (expert parallelism runs with zero 0)`,
      );
    }
    if (arch !== 'gpt-moe' && arch !== 'mamba-moe') {
      throw new Error(`ep ${plan.ep} needs --arch gpt-moe or mamba-moe, got ${arch}`);
    }
    return 'ep';
  }
  return plan.zero > 0 ? 'zero' : 'dp';
}
