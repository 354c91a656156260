/**
 * The host side of a parallel run: drives a launched `World` whose workers serve run.ts's
 * PARALLEL_TASKS, step batch by step batch, collecting each rank's records and checkpoint files.
 */
import type { World } from '../dist/launch.ts';
import type { Backend } from '../gpu/device.ts';
import type { TrainConfig } from '../train/config.ts';
import { type ParallelPlan, planWorldSize } from './plan.ts';
import type { RankStepRecord, RankSummary, RunData, TrainRankArgs } from './run.ts';
import type { Sent } from './traffic.ts';

/** One step of the whole world, as the host reports it. */
export interface StepReport extends Omit<RankStepRecord, 'sent' | 'byDim' | 'ms'> {
  /** Slowest rank's wall ms. */
  ms: number;
  /** Per world rank: elements sent by `group/op` and by `dim/collective`. */
  sent: Sent[];
  byDim: Record<string, number>[];
}

/** Where a parallel run checkpoints, and how the host stores a complete set of rank files. */
export interface ParallelCheckpointing {
  /** Whether to checkpoint after `done` steps. */
  at(done: number): boolean;
  /** Stores the world's files (index = rank) taken after `done` steps. */
  save(done: number, shards: Uint8Array[]): Promise<void>;
}

/**
 * Host side: trains `cfg` under `plan` on a launched `world` (whose workers serve
 * {@link PARALLEL_TASKS}), calling `onStep` after every step (in batches of logInterval steps,
 * one round trip each). With `resume` (every rank's file of one checkpoint) the ranks restore
 * their state and the run continues at its step; with `checkpoint` the ranks' files are
 * collected after every step it selects. Returns every step run and every rank's summary.
 * @throws Error when the world's size is not the plan's, `resume` holds another number of
 *   files, or a rank's error ("rank R: …", e.g. a checkpoint of another plan).
 */
export async function runParallel(
  world: World,
  plan: ParallelPlan,
  cfg: TrainConfig,
  data: RunData,
  onStep?: (r: StepReport) => void | Promise<void>,
  opts: { backend?: Backend; bucketBytes?: number | 'layer'; resume?: { step: number; shards: Uint8Array[] }; checkpoint?: ParallelCheckpointing } = {},
): Promise<{ steps: StepReport[]; ranks: RankSummary[] }> {
  if (world.size !== planWorldSize(plan)) throw new Error(`runParallel: the world has ${world.size} ranks, the plan needs ${planWorldSize(plan)}`);
  if (opts.resume && opts.resume.shards.length !== world.size) throw new Error(`runParallel: the checkpoint has ${opts.resume.shards.length} rank files, the world ${world.size} ranks`);
  const base = { plan, cfg, data, backend: opts.backend, bucketBytes: opts.bucketBytes };
  await world.run('trainStart', (r: number) => ({ ...base, resume: opts.resume?.shards[r] }) satisfies TrainRankArgs);
  const steps: StepReport[] = [];
  for (let from = opts.resume?.step ?? 0; from < cfg.steps;) {
    let to = Math.min(cfg.steps, from + cfg.logInterval);
    if (opts.checkpoint) for (let d = from + 1; d < to; d++) if (opts.checkpoint.at(d)) to = d;
    const recs = await world.run<RankStepRecord[]>('trainSteps', { to });
    for (let i = 0; i < to - from; i++) {
      const r0 = recs[0][i];
      const rep: StepReport = { ...r0, ms: Math.max(...recs.map((r) => r[i].ms)), sent: recs.map((r) => r[i].sent), byDim: recs.map((r) => r[i].byDim) };
      rep.tokensPerSec = (cfg.batchSize * cfg.gradAccum * cfg.blockSize * 1000) / rep.ms;
      steps.push(rep);
      await onStep?.(rep);
    }
    if (opts.checkpoint?.at(to)) await opts.checkpoint.save(to, await world.run<Uint8Array>('trainCheckpoint'));
    from = to;
  }
  return { steps, ranks: await world.run<RankSummary>('trainEnd') };
}
