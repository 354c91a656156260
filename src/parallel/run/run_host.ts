/**
 * The host side of a parallel run: drives a launched `World` whose workers serve run_tasks.ts's
 * `parallelTasks`, step batch by step batch, collecting each rank's records and checkpoint files.
 * The cadence is the one training loop's (src/train/loop.ts): the host is its stepper, whose
 * steps the ranks run at the loop's drain, one round trip per batch.
 *
 * A checkpoint is saved only once its state is known good (src/train/finite.ts): every rank
 * finite (checked on the ranks, run_save.ts), and the loss and gradient norm of the next step,
 * computed from it, finite. While the run goes on, that next step is the first of the next
 * batch: the files wait in host memory until its record arrives. When the run ends there (its
 * last step, or a stop), the ranks run one probe step from the saved state instead.
 */
import type { Backend } from '../../gpu/device.ts';
import type { TrainConfig } from '../../train/config.ts';
import { type ParallelPlan, planWorldSize } from '../plan/plan.ts';
import type { RankStepRecord, RankSummary, RunData, TrainRankArgs } from './run.ts';
import type { Sent } from '../mesh/traffic.ts';
import { combineRouting, type SplitRouting } from '../expert/moe_routing.ts';
import type { RankSave } from './run_save.ts';
import type { StepStop } from './step_stop.ts';
import { DivergenceError, fmtCount, probeReason } from '../../train/finite.ts';
import { type Stepper, TrainingLoop } from '../../train/loop.ts';

/**
 * What the host loop needs of a world: its size and `run` (a task on every rank, results in rank
 * order). launch.ts `World` (worker ranks) and comm/mpi/task_world.ts `MpiTaskWorld` (one MPI
 * process per rank, each running this loop itself) both provide it.
 */
export interface TaskWorld {
  readonly size: number;
  run<R = unknown>(name: string, args?: unknown | ((rank: number) => unknown)): Promise<R[]>;
}

/** One step of the whole world, as the host reports it. */
export interface StepReport extends Omit<RankStepRecord, 'sent' | 'byDim' | 'ms' | 'routing'> {
  /** Slowest rank's wall ms and simulated µs. */
  ms: number;
  simUs: number;
  /** Per world rank: elements sent by `group/op` and by `dim/collective`. */
  sent: Sent[];
  byDim: Record<string, number>[];
  /** A MoE model routed in several token groups: how its split's capacity treated the step's choices (moe_routing.ts). */
  routing?: SplitRouting;
}

/** Where a parallel run checkpoints, and how the host stores a complete set of rank files. */
export interface ParallelCheckpointing {
  /** Whether to checkpoint after `done` steps. */
  at(done: number): boolean;
  /** Stores the world's files (index = rank) taken after `done` steps. */
  save(done: number, shards: Uint8Array[]): Promise<void>;
  /** Where the files go (the run directory), for the messages. */
  where?: string;
}

/**
 * Host side: trains `cfg` under `plan` on a launched `world` (whose workers serve
 * run_tasks.ts `parallelTasks`), calling `onStep` after every step (in batches up to each multiple of
 * logInterval and each checkpoint step, one round trip each). With `resume` (every rank's file of one checkpoint, as
 * io/checkpoint_set.ts loadCheckpointSet returns it, having checked the set's batch order) the ranks restore
 * their state and the run continues at its step; with `checkpoint` the ranks' files are
 * collected after every step it selects, and saved once checked (see the module doc). With
 * `stop`, a request ends the current batch early at a step boundary the ranks agree on
 * (step_stop.ts); the state there is checkpointed and the run returns with `stoppedAt`.
 * Returns every step run, every rank's summary, and the steps done when stopped (else null).
 * @throws DivergenceError when a step's loss or gradient norm, or a state to be saved, is not
 *   finite (nothing is saved over the last good checkpoint); Error when the world's size is not
 *   the plan's, `resume` holds another number of files, or a rank's error ("rank R: …", e.g. a
 *   checkpoint of another plan).
 */
export async function runParallel(
  world: TaskWorld,
  plan: ParallelPlan,
  cfg: TrainConfig,
  data: RunData,
  onStep?: (r: StepReport) => void | Promise<void>,
  opts: {
    backend?: Backend;
    /** This process's ranks' adapter (the MPI transport: every process runs this loop for its own rank). */
    adapter?: string;
    bucketBytes?: number | 'layer';
    resume?: { step: number; shards: Uint8Array[] };
    checkpoint?: ParallelCheckpointing;
    stop?: StepStop;
  } = {},
): Promise<{ steps: StepReport[]; ranks: RankSummary[]; stoppedAt: number | null }> {
  if (world.size !== planWorldSize(plan)) {
    throw new Error(`runParallel: the world has ${world.size} ranks, the plan needs ${planWorldSize(plan)}`);
  }
  if (opts.resume && opts.resume.shards.length !== world.size) {
    throw new Error(
      `runParallel: the checkpoint has ${opts.resume.shards.length} rank files, the world ${world.size} ranks`,
    );
  }
  const { checkpoint: ckpt, stop } = opts;
  const base = {
    plan,
    cfg,
    data,
    backend: opts.backend,
    adapter: opts.adapter,
    bucketBytes: opts.bucketBytes,
    stop: stop?.buffer,
  };
  await world.run('trainStart', (r: number) => ({ ...base, resume: opts.resume?.shards[r] }) satisfies TrainRankArgs);
  const start = opts.resume?.step ?? 0, steps: StepReport[] = [];
  let asked = start, ran = start, pending: { done: number; shards: Uint8Array[] } | null = null;
  const host: Stepper<StepReport, never> = {
    lastGood: opts.resume?.step ?? null,
    // The ranks run the steps asked for at the next drain, one round trip for the batch.
    step: (s) => Promise.resolve(void (asked = s + 1)),
    async drain() {
      const recs = await world.run<RankStepRecord[]>('trainSteps', { to: asked });
      const n = recs[0].length;
      if (recs.some((r) => r.length !== n) || (n === 0 && !stop?.requested)) {
        throw new Error(
          `runParallel: the ranks ran ${
            recs.map((r) => r.length).join(', ')
          } steps of the batch ${ran}…${asked}; they must agree`,
        );
      }
      const out: StepReport[] = [];
      for (let i = 0; i < n; i++) {
        const rep: StepReport = {
          ...recs[0][i],
          ms: Math.max(...recs.map((r) => r[i].ms)),
          simUs: Math.max(...recs.map((r) => r[i].simUs)),
          sent: recs.map((r) => r[i].sent),
          byDim: recs.map((r) => r[i].byDim),
          routing: combineRouting(recs.map((r) => r[i].routing), cfg),
        };
        rep.tokensPerSec = (cfg.batchSize * cfg.gradAccum * cfg.blockSize * 1000) / rep.ms;
        // The step right after a checkpoint tests the state that checkpoint holds: saved once it passes.
        if (pending?.done === rep.step) {
          if (divergence(rep)) {
            throw new DivergenceError(rep.step - 1, probeReason(rep)!, host.lastGood ?? null, ckpt?.where);
          }
          await commit(pending);
          pending = null;
        }
        out.push(rep);
      }
      ran += n;
      return out;
    },
  };
  const commit = async (p: { done: number; shards: Uint8Array[] }) => {
    await ckpt!.save(p.done, p.shards);
    host.lastGood = p.done;
  };
  // The ranks' files after `done` steps once every rank's state is finite (with `final`, also the next step's loss), else why not.
  if (ckpt) {
    host.checkpoint = async (done, final) => {
      const res = await world.run<RankSave>('trainSave', { probe: final });
      if (res[0].total > 0) {
        const by = res.flatMap((r, rank) => (r.local ? [`rank ${rank}: ${fmtCount(r.local)}`] : [])).join(', ');
        return `${fmtCount(res[0].total)} non-finite values in parameters/optimizer state after the update (${by})`;
      }
      const why = final ? probeReason(res[0].probe!) : null;
      if (why) return why;
      const p = { done, shards: res.map((r) => r.bytes!) };
      if (final) await commit(p);
      else pending = p;
      return null;
    };
  }
  const { done, stopped } = await new TrainingLoop(host, {
    start,
    end: cfg.steps,
    logInterval: cfg.logInterval,
    evalInterval: 0, // rank 0 evaluates in its step (run.ts) and reports valLoss in the record
    checkpointAt: ckpt && ((d) => ckpt.at(d)),
    shouldStop: () => stop?.requested ?? false,
    dir: ckpt?.where,
    diverged: (r) => (divergence(r) ? `loss became ${r.loss} (gradient norm ${r.gradNorm})` : null),
    hooks: {
      record: async (r) => {
        steps.push(r);
        await onStep?.(r);
      },
    },
  }).run();
  return { steps, ranks: await world.run<RankSummary>('trainEnd'), stoppedAt: stopped ? done : null };
}

/** Whether a step diverged: its loss or gradient norm is not finite (a step the f16 loss scaler skipped overflows by design). */
function divergence(r: StepReport): boolean {
  return !Number.isFinite(r.loss) || (!Number.isFinite(r.gradNorm) && !r.skipped);
}
