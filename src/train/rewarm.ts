/** Re-warming a resumed run (continual pre-training, Gupta et al. arXiv 2308.04014; Ibrahim et al. arXiv 2403.08763). */
import { parseConfig, type TrainConfig } from './config.ts';
import { lrAt, scheduleFromConfig } from './schedules.ts';

/**
 * Fills in a re-warm's −1 placeholders: it starts at the resumed checkpoint's step, from the LR
 * the checkpointed run's own schedule had there (0 on a fresh run). The resolved numbers are
 * saved with the config, so resuming the re-warmed run later keeps the same schedule.
 * @throws Error when the result is not a valid config.
 */
export function resolveRewarm(cfg: TrainConfig, resumed: { step: number; config: TrainConfig } | null): TrainConfig {
  if (cfg.schedule !== 'rewarm-cosine') return cfg;
  const start = cfg.rewarmStart >= 0 ? cfg.rewarmStart : resumed?.step ?? 0;
  let from = cfg.rewarmFrom;
  if (from < 0) from = resumed ? lrAt(scheduleFromConfig(parseConfig({ ...resumed.config })), start) : 0;
  return parseConfig({ ...cfg, rewarmStart: start, rewarmFrom: from });
}
