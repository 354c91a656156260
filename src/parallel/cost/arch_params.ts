/**
 * The planner's view of the architectures other than GPT (docs/design.md#accounting-derived-from-the-model): each
 * rank's parameters counted by building its model (derived_params.ts), so `npm run plan` and the memory table are exact
 * for every architecture, and the shapes the activation count reads.
 */
import type { TrainConfig } from '../../train/config.ts';
import { dtRank } from '../../models/mamba.ts';
import type { ArchLayout } from '../plan/plan.ts';
import { derivedRankParams } from './derived_params.ts';

/**
 * The layout of `cfg.arch` for the planner, or undefined for GPT (plan.ts rankParams counts it by its shape). The MoE
 * models count their experts apart (`expert`): this rank's E/ep of each MoE block it holds.
 */
export function archLayout(cfg: TrainConfig, vocabSize: number): ArchLayout | undefined {
  const arch = cfg.arch;
  if (arch === 'gpt') return undefined;
  return {
    arch,
    params: derivedRankParams(cfg, vocabSize),
    dtRank: dtRank(cfg.nEmbd),
    dState: cfg.dState,
    attnEvery: cfg.attnEvery,
    expand: cfg.expand,
    decay: cfg.linearDecay,
    ...(arch === 'recurrent-depth' && {
      recurrence: {
        prelude: cfg.preludeLayers,
        core: cfg.nLayer - cfg.preludeLayers - cfg.codaLayers,
        backprop: cfg.recurBackprop,
        meanIters: cfg.recurIters,
      },
    }),
  };
}
