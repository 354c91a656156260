/**
 * The per-rank tasks a parallel run's workers serve (workers/rank.worker.ts): one call that
 * trains to the end, or the streaming trio the host drives between progress reports
 * (run_host.ts). Kept apart from run.ts, which holds what one rank's run is.
 */
import type { Communicator } from '../../comm/communicator.ts';
import type { RankTask } from '../../comm/launch.ts';
import { RankRun, type RankStepRecord, type RankSummary, type TrainRankArgs } from './run.ts';
import { checkedCheckpoint } from './run_save.ts';
import type { PriceActions } from '../mesh/sim_compute.ts';

/**
 * The per-rank task: builds the shard and trainer for `args.plan`, runs `cfg.steps` steps
 * (each handed to `onRecord` as it completes) and returns the records and the accounting;
 * `priceActions` as {@link RankRun.open} takes it.
 * @throws (rejects with) the errors of {@link RankRun.open} or a collective's (a peer failed).
 */
export async function trainRank(
  args: TrainRankArgs,
  world: Communicator,
  onRecord?: (r: RankStepRecord) => void,
  priceActions?: PriceActions,
): Promise<RankSummary> {
  const run = await RankRun.open(world, args, priceActions);
  try {
    const records: RankStepRecord[] = [];
    while (run.next < run.cfg.steps) {
      records.push(await run.step());
      onRecord?.(records[records.length - 1]);
    }
    return run.summary(records);
  } finally {
    await run.close();
  }
}

const runs = new WeakMap<Communicator, RankRun>();
const running = (world: Communicator) => {
  const r = runs.get(world);
  if (!r) throw new Error(`rank ${world.transport.rank}: no parallel run started (call trainStart first)`);
  return r;
};

/**
 * World tasks for workers/rank.worker.ts: `trainRank` (one call, all records at the end) and the
 * streaming trio `trainStart` → `trainSteps {to}` (records of the steps up to `to`, fewer when
 * a shared stop request ends the batch early) → `trainEnd` (summary, device freed) that
 * run_host.ts `runParallel` uses to report progress between calls, with `trainSave` between batches.
 * `priceActions` (src/perf/action_prices.ts `simActionUs`) comes from the worker or host that serves
 * them: src/perf sits above src/parallel (docs/design.md#layers).
 */
export const parallelTasks = (priceActions: PriceActions): Record<string, RankTask> => ({
  trainRank: (world, args: TrainRankArgs) => trainRank(args, world, undefined, priceActions),
  async trainStart(world, args: TrainRankArgs) {
    if (runs.has(world)) throw new Error(`rank ${world.transport.rank}: a parallel run is already in progress`);
    runs.set(world, await RankRun.open(world, args, priceActions));
    return null;
  },
  async trainSteps(world, { to }: { to: number }) {
    const run = running(world), out: RankStepRecord[] = [];
    try {
      while (run.next < Math.min(to, run.cfg.steps) && !run.stop?.stopsBefore(run.next)) out.push(await run.step());
    } catch (e) {
      runs.delete(world);
      await run.close().catch(() => {});
      throw e;
    }
    return out;
  },
  /** This rank's checkpoint file (bytes) after the steps run so far. */
  trainCheckpoint: (world) => running(world).checkpoint(),
  /** The same, checked first (run_save.ts `checkedCheckpoint`); with `probe` the run ends after it. */
  trainSave: (world, { probe }: { probe: boolean }) => checkedCheckpoint(running(world), probe),
  async trainEnd(world) {
    const run = running(world);
    runs.delete(world);
    const s = await run.summary();
    await run.close();
    return s;
  },
});
