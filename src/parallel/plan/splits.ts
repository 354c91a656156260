/**
 * Which architectures each split applies to (docs/design.md#parallel-strategies and
 * docs/design.md#one-model-many-contexts), as data: rules.ts's table refuses a split by it, and the help text of
 * every split flag (plan_schema.ts, src/cli/train_parallel.ts) is written from it, so the two cannot disagree.
 */
import { MOE_ARCHS } from '../../models/archs.ts';

/** A split a plan may turn on, and the architectures that take it. */
export type SplitDim = 'tp' | 'sp' | 'pp' | 'cp' | 'ep';

/**
 * Which architecture each split applies to, one entry per dimension, and why:
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
 * - ep: the mixture-of-experts architectures (ep < dp is DeepSpeed-MoE's layout, experts
 *   replicated over the dp/ep groups, which ZeRO shards them over: zero_groups.ts).
 */
export const SPLIT_ARCHS: Record<SplitDim, { archs: readonly string[]; why: string }> = {
  tp: {
    archs: ['gpt', 'mamba', 'hybrid', 'linear', 'gpt-moe', 'mamba-moe', 'recurrent-depth'],
    why: 'tensor parallelism splits the architectures tp_table.ts covers',
  },
  sp: {
    archs: ['gpt', 'mamba', 'hybrid', 'linear', 'gpt-moe', 'mamba-moe', 'recurrent-depth'],
    why: "sequence parallelism shards the residual stream's tokens",
  },
  pp: {
    archs: ['gpt', 'linear', 'mamba', 'hybrid', 'gpt-moe', 'mamba-moe', 'recurrent-depth'],
    why: 'pipeline stages split the architectures written as pieces',
  },
  cp: {
    archs: ['gpt', 'recurrent-depth'],
    why: 'context parallelism splits attention only; the recurrent mixers would need a sequence-parallel scan',
  },
  ep: { archs: MOE_ARCHS, why: 'expert parallelism spreads the experts of a mixture-of-experts model' },
};

/** The architectures `dim` applies to, as help text writes them: `--arch gpt | recurrent-depth`. */
export const splitArchHelp = (dim: SplitDim) => `--arch ${SPLIT_ARCHS[dim].archs.join(' | ')}`;
