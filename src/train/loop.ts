/**
 * The one training loop (docs/design.md#one-training-loop; runtime-neutral, no file system): steps from a start
 * step to an end, drains the step records every log interval (the GPU keeps working between
 * drains), refuses a non-finite loss with a DivergenceError naming the last good checkpoint,
 * evaluates every evalInterval steps and after the last, checkpoints where `checkpointAt` says
 * (and on a stop), and stops at a step boundary when `shouldStop()` turns true. What is
 * stepped is a {@link Stepper} (the single-rank Trainer, a parallel run's host, an experiment's
 * trainer); what is printed or written goes through {@link LoopHooks}, so the CLI, the parallel
 * host, experiments and the browser worker share the cadence and only differ in their output.
 */
import { DivergenceError } from './finite.ts';

/** What the loop reads of a step record: its 0-based step and its loss. */
export interface LoopRecord {
  step: number;
  loss: number;
}

/**
 * What the loop drives. `E` is what one evaluation returns (a validation loss, or several named
 * values).
 */
export interface Stepper<R extends LoopRecord, E = number> {
  /** Runs (or encodes) optimizer step `s` (0-based). */
  step(s: number): Promise<void>;
  /** The records of every step since the last drain, in step order (waits for the device). */
  drain(): Promise<R[]>;
  /** Evaluates the model after step `step` (0-based; the last record's). */
  evaluate?(step: number): Promise<E>;
  /**
   * Checks the state after `done` steps and saves it when it is good: resolves to null once
   * saved, else to why it is not good (then nothing was written; see src/train/finite.ts).
   * `final`: the run ends here (its last step, or a stop), so no later step will run from it.
   */
  checkpoint?(done: number, final: boolean): Promise<string | null>;
  /**
   * A stepper that writes a checkpoint only once a later step has shown its state good (a
   * parallel run's host, src/parallel/run/run_host.ts) reports here the steps done at the newest one
   * written; others leave it out, and the loop counts a checkpoint as saved when `checkpoint`
   * resolves to null.
   */
  lastGood?: number | null;
}

/** Where the loop's output goes: every hook is optional. */
export interface LoopHooks<R extends LoopRecord, E = number> {
  /** After step `s` ran, before the stop request is read (the CLI lets a signal in here). */
  afterStep?(s: number): Promise<void>;
  /** Each drained record once it is known not to diverge, with the wall ms per step of its interval. */
  record?(r: R, msPerStep: number): void | Promise<void>;
  /** Once per drain, after its records: the records and the wall ms per step between drains. */
  log?(recs: R[], msPerStep: number): void | Promise<void>;
  /** An evaluation after step `step` (0-based). */
  eval?(step: number, e: E): void | Promise<void>;
  /**
   * After a drain's evaluation and checkpoint, before the interval's clock restarts: a pause
   * waits here without counting as training time.
   */
  boundary?(done: number): Promise<void>;
  /** After every step that did not stop the run: steps done so far. */
  progress?(done: number): void;
}

export interface LoopOptions<R extends LoopRecord, E = number> {
  /** Steps done before the loop (0, or a resumed checkpoint's step): the first step run is `start`. */
  start: number;
  /** The end: the last step run is `end − 1` (usually cfg.steps). */
  end: number;
  /** Drain the records every `logInterval` steps done (and at every evaluation, checkpoint, stop and the end). */
  logInterval: number;
  /** Evaluate after every `evalInterval` steps done and after the last step; 0 or no evaluate: never. */
  evalInterval: number;
  /** Whether to checkpoint after `done` steps (train/checkpoint.ts isCheckpointStep); a stop always does. */
  checkpointAt?: (done: number) => boolean;
  /** Read after every step and after a drain: true stops the run at that step boundary (after its checkpoint). */
  shouldStop?: () => boolean;
  /** Why a drained record shows the run diverged, else null (default: a loss that is not finite). */
  diverged?: (r: R) => string | null;
  /** Steps done at the newest checkpoint known good before the loop (a resume's), else null. */
  lastGood?: number | null;
  /** The run directory a DivergenceError names. */
  dir?: string;
  /** Wall clock in ms (default performance.now). */
  now?: () => number;
  hooks?: LoopHooks<R, E>;
}

/** How a loop ended: steps done, and whether `shouldStop` ended it early. */
export interface LoopResult {
  done: number;
  stopped: boolean;
}

/**
 * One run of the loop over a stepper. A class so that a caller handling an error thrown out of
 * {@link run} (a lost device) can still read {@link lastGood}.
 * @throws Error from the constructor when the intervals or steps are not whole numbers in range.
 */
export class TrainingLoop<R extends LoopRecord, E = number> {
  /** Steps done at the newest checkpoint this loop saved (or the resume's). */
  private saved: number | null;

  constructor(readonly stepper: Stepper<R, E>, readonly o: LoopOptions<R, E>) {
    const whole = (v: number, min: number) => Number.isInteger(v) && v >= min;
    if (!whole(o.start, 0) || !whole(o.end, o.start)) {
      throw new Error(`training loop: start ${o.start} and end ${o.end} must be whole numbers with 0 ≤ start ≤ end`);
    }
    if (!whole(o.logInterval, 1)) {
      throw new Error(`training loop: logInterval must be an integer ≥ 1, got ${o.logInterval}`);
    }
    if (!whole(o.evalInterval, 0)) {
      throw new Error(`training loop: evalInterval must be an integer ≥ 0 (0: never), got ${o.evalInterval}`);
    }
    this.saved = o.lastGood ?? null;
  }

  /** Steps done at the newest checkpoint saved and known good, or null when there is none. */
  get lastGood(): number | null {
    return this.stepper.lastGood !== undefined ? this.stepper.lastGood : this.saved;
  }

  /**
   * Runs steps [start, end), or up to a stop.
   * @throws DivergenceError when a drained record diverged (a loss that is not finite, or
   *   `o.diverged`), or the stepper's checkpoint finds the state not good (nothing is saved over
   *   the last good checkpoint); Error when a drain returns other steps than those run (fewer
   *   only at a stop); whatever the stepper or a hook throws.
   */
  async run(): Promise<LoopResult> {
    const { stepper, o } = this, h = o.hooks ?? {}, now = o.now ?? (() => performance.now());
    const evaluates = o.evalInterval > 0 && stepper.evaluate !== undefined;
    const checkpoints = stepper.checkpoint !== undefined;
    const diverges = o.diverged ?? ((r: R) => (Number.isFinite(r.loss) ? null : `loss became ${r.loss}`));
    const stopRequested = () => o.shouldStop?.() ?? false;
    let tLast = now(), drained = o.start;
    for (let s = o.start; s < o.end; s++) {
      await stepper.step(s);
      await h.afterStep?.(s);
      let done = s + 1, stopNow = stopRequested();
      const due = done % o.logInterval === 0 || done === o.end ||
        (evaluates && done % o.evalInterval === 0) || (checkpoints && (o.checkpointAt?.(done) ?? false));
      if (!due && !stopNow) {
        h.progress?.(done);
        continue;
      }
      const recs = await stepper.drain();
      const t = now();
      // A stop that came in while the records were awaited ends the run here too.
      stopNow ||= stopRequested();
      this.checkDrain(recs, drained, done, stopNow);
      done = drained = drained + recs.length;
      const last = done === o.end;
      if (recs.length) {
        const ms = (t - tLast) / recs.length;
        for (const r of recs) {
          const why = diverges(r);
          if (why !== null) throw this.diverged(r.step, why);
          await h.record?.(r, ms);
        }
        await h.log?.(recs, ms);
        if (evaluates && (done % o.evalInterval === 0 || last)) {
          const e = await stepper.evaluate!(done - 1);
          await h.eval?.(done - 1, e);
        }
      }
      if (checkpoints && ((o.checkpointAt?.(done) ?? false) || stopNow) && done !== this.lastGood) {
        const why = await stepper.checkpoint!(done, last || stopNow);
        if (why !== null) throw this.diverged(done - 1, why);
        this.saved = done;
      }
      await h.boundary?.(done);
      tLast = now(); // evaluation, checkpoints and pauses are not training time
      if (stopNow) return { done, stopped: true };
      h.progress?.(done);
    }
    return { done: o.end, stopped: false };
  }

  /**
   * A drain must return the records of steps [drained, done) in order; a stepper whose steps run
   * at the drain (a parallel run's ranks) may return fewer when they agreed on an earlier stop.
   */
  private checkDrain(recs: R[], drained: number, done: number, stopping: boolean): void {
    const inOrder = recs.every((r, i) => r.step === drained + i);
    const count = recs.length === done - drained || (stopping && recs.length < done - drained);
    if (!inOrder || !count) {
      throw new Error(
        `training loop: the stepper drained the records of steps [${
          recs.map((r) => r.step).join(', ')
        }] for steps ${drained}…${done - 1}${stopping ? ' (stopping: a prefix of them)' : ''}`,
      );
    }
  }

  private diverged(step: number, what: string): DivergenceError {
    return new DivergenceError(step, what, this.lastGood, this.o.dir);
  }
}
