/**
 * A live parallel run from the page: launches a world of browser rank workers
 * (workers/rank.worker.ts through `spawnRankWorker`, the network model of the Setup), drives
 * `runParallel` (src/parallel/run/run.ts) and turns its callbacks into pause / single-step / stop.
 * `runParallel` awaits each step callback, so holding it holds the host between batches of
 * logInterval steps — with logInterval 1 a single step is exactly one optimizer step. The
 * ranks' spans are collected after every batch (and cleared on the ranks) so the timeline,
 * communication and mesh panels update while the run goes on.
 */
import { World } from '../../comm/launch.ts';
import { regionBytesFor } from '../../comm/data_plane.ts';
import type { Span } from '../../comm/trace.ts';
import type { RankSummary } from '../../parallel/run/run.ts';
import { runParallel, type StepReport } from '../../parallel/run/run_host.ts';
import type { TrainConfig } from '../../train/config.ts';
import { spawnRankWorker } from '../rank.ts';
import type { ParallelChoice } from './parallel_setup.ts';

/** What the page hears from a run. */
export interface SessionEvents {
  onStep(rep: StepReport): void;
  /** New spans since the last call (every rank). */
  onSpans(spans: Span[]): void;
  /**
   * The world is up: the data plane it uses and, when it fell back to MessagePorts, why
   * (docs/design.md#the-shared-data-plane-of-worker-ranks).
   */
  onPlane?(plane: string, note: string): void;
  onStatus(text: string): void;
}

/** How a session ended. */
export interface SessionResult {
  stopped: boolean;
  steps: StepReport[];
  ranks: RankSummary[];
}

class Stopped extends Error {}

/** One live parallel run: `run()` launches, trains and shuts down; pause / stepOnce / stop steer it. */
export class ParallelSession {
  private world: World | null = null;
  private gate: { promise: Promise<void>; resolve: () => void } | null = null;
  private stopRequested = false;
  private stepsLeft = Infinity;
  private readonly steps: StepReport[] = [];

  constructor(private readonly choice: ParallelChoice, private readonly cfg: TrainConfig, private readonly text: string, private readonly ev: SessionEvents) {}

  /** Pauses after the current step report. */
  pause(): void {
    this.stepsLeft = 0;
  }

  resume(): void {
    this.stepsLeft = Infinity;
    this.open();
  }

  /** Runs one more step, then pauses again. */
  stepOnce(): void {
    this.stepsLeft = 1;
    this.open();
  }

  /** Ends the run after the current step report. */
  stop(): void {
    this.stopRequested = true;
    this.open();
  }

  private open(): void {
    this.gate?.resolve();
    this.gate = null;
  }

  /**
   * Launches the world, trains, collects the trace and shuts the world down.
   * @throws Error from the launch or from a rank ("rank R: …"); a stop is not an error.
   */
  async run(): Promise<SessionResult> {
    const { plan, worldSize, net, dataPlane, regionMb } = this.choice;
    this.ev.onStatus(`launching ${worldSize} rank workers…`);
    const regionBytes = this.choice.regionBytes ?? (regionMb !== undefined ? regionBytesFor(0, regionMb) : undefined);
    this.world = await World.launch({ size: worldSize, spawn: spawnRankWorker, net, timeoutMs: 120_000, runTimeoutMs: 600_000, dataPlane, regionBytes });
    const world = this.world;
    this.ev.onPlane?.(world.dataPlane, world.planeNote);
    try {
      this.ev.onStatus('opening devices and compiling kernels…');
      let stopped = false;
      let ranks: RankSummary[] = [];
      try {
        const r = await runParallel(world, plan, this.cfg, { text: this.text }, (rep) => this.onStep(rep), { backend: 'browser' });
        ranks = r.ranks;
      } catch (e) {
        if (!(e instanceof Stopped)) throw e;
        stopped = true;
      }
      this.ev.onSpans(await world.trace(true));
      return { stopped, steps: this.steps, ranks };
    } finally {
      await world.shutdown();
      this.world = null;
    }
  }

  private async onStep(rep: StepReport): Promise<void> {
    this.steps.push(rep);
    this.ev.onStep(rep);
    const batchEnd = (rep.step + 1) % this.cfg.logInterval === 0 || rep.step + 1 === this.cfg.steps;
    // Between batches every rank is idle, so collecting spans cannot race a step.
    if (batchEnd && this.world) this.ev.onSpans(await this.world.trace(true));
    if (this.stopRequested) throw new Stopped('stopped');
    if (this.stepsLeft !== Infinity) this.stepsLeft--;
    if (this.stepsLeft <= 0 && rep.step + 1 < this.cfg.steps) {
      this.ev.onStatus(`paused after step ${rep.step}: Resume or Step`);
      let resolve!: () => void;
      const promise = new Promise<void>((r) => (resolve = r));
      this.gate = { promise, resolve };
      await promise;
      if (this.stopRequested) throw new Stopped('stopped');
    }
  }
}
