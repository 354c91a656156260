/**
 * Which trainer runs a plan, and which architectures each split applies to (docs/design.md §16,
 * §23): the rules between a plan and a model that no single dimension's validation sees.
 */
import type { ParallelPlan, StrategyKind } from './plan.ts';

/**
 * Which architecture each split applies to (docs/design.md §23), as one rule per dimension:
 * - tp: the architectures tp_table.ts covers — gpt, mamba (Mamba-2's split of the inner
 *   channels), hybrid. Not linear: its output norm ln_x spans the whole width, so splitting its
 *   heads needs a per-head norm; not the MoE models (their forward is not written as pieces yet).
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
      ['gpt', 'mamba', 'hybrid'],
      "tensor parallelism splits gpt, mamba (inner channels) and hybrid; linear's ln_x normalises over every head",
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
    if ((plan[dim] as number) > 1 && !archs.includes(arch)) {
      throw new Error(`${dim} ${plan[dim]} does not apply to --arch ${arch}: ${why} (allowed: ${archs.join(', ')})`);
    }
  }
}

/**
 * The trainer for `plan`: the mesh trainer (mesh_trainer.ts) whenever the model is split — any
 * of pp, cp, tp > 1, with dp and ZeRO-1 — else dp (ZeRO 0), zero (ZeRO-1/2/3 over dp), or ep.
 * @throws Error "not supported yet: …" for ZeRO-2/3 or ep with a split model, or from
 *   {@link checkArchSplit}.
 */
export function strategyOf(plan: ParallelPlan, arch: string): StrategyKind {
  if (plan.ep <= 1) checkArchSplit(plan, arch);
  const split = (['pp', 'cp', 'tp'] as const).filter((k) => plan[k] > 1);
  if (split.length) {
    const other = [plan.ep > 1 && `ep ${plan.ep}`, plan.zero > 1 && `zero ${plan.zero}`].filter(Boolean);
    const dims = (['dp', 'pp', 'cp', 'tp'] as const).filter((k) => plan[k] > 1).map((k) => `${k} ${plan[k]}`).join(
      ' × ',
    );
    if (other.length) {
      throw new Error(
        `not supported yet: ${
          other.join(', ')
        } combined with ${dims} (the mesh trainer composes dp × pp × cp × tp (+sp) with ZeRO-1)`,
      );
    }
    return 'mesh';
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
