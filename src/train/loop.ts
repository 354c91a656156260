/**
 * The one training loop (docs/design.md#layers: runtime-neutral, no file system): steps from a start
 * step to an end, drains the step records every log interval (the GPU keeps working between
 * drains), refuses a non-finite loss with a DivergenceError naming the last good checkpoint,
 * evaluates every evalInterval steps and after the last, checkpoints where `checkpointAt` says
 * (and on a stop), and stops at a step boundary when `shouldStop()` turns true. What is
 * stepped is a {@link Stepper} (the single-rank Trainer, an experiment's trainer); what is
 * printed or written goes through {@link LoopHooks}, so the CLI, experiments and the browser
 * worker share the cadence and only differ in their output.
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
   */
  checkpoint?(done: number): Promise<string | null>;
}

/** Where the loop's output goes: every hook is optional. */
export interface LoopHooks<R extends LoopRecord, E = number> {
  /** After step `s` ran, before the stop request is read (the CLI lets a signal in here). */
  afterStep?(s: number): Promise<void>;
  /** Each drained record once its loss is known finite, with the wall ms per step of its interval. */
  record?(r: R, msPerStep: number): void;
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
  /** Read after every step: true stops the run at that step boundary (after its checkpoint). */
  shouldStop?: () => boolean;
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
  /** Steps done at the newest checkpoint saved and known good, or null when there is none. */
  lastGood: number | null;

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
    this.lastGood = o.lastGood ?? null;
  }

  /**
   * Runs steps [start, end), or up to a stop.
   * @throws DivergenceError when a drained loss is not finite, or the stepper's checkpoint
   *   finds the state not good (nothing is saved over the last good checkpoint); whatever the
   *   stepper or a hook throws.
   */
  async run(): Promise<LoopResult> {
    const { stepper, o } = this, h = o.hooks ?? {}, now = o.now ?? (() => performance.now());
    const evaluates = o.evalInterval > 0 && stepper.evaluate !== undefined;
    let tLast = now();
    for (let s = o.start; s < o.end; s++) {
      await stepper.step(s);
      await h.afterStep?.(s);
      const done = s + 1, last = done === o.end;
      const stopNow = o.shouldStop?.() ?? false;
      const evalNow = evaluates && (done % o.evalInterval === 0 || last);
      const ckptNow = stepper.checkpoint !== undefined && ((o.checkpointAt?.(done) ?? false) || stopNow);
      if (done % o.logInterval === 0 || last || evalNow || ckptNow || stopNow) {
        const recs = await stepper.drain();
        if (!recs.length) throw new Error(`training loop: the stepper drained no records after step ${s}`);
        const t = now(), ms = (t - tLast) / recs.length;
        for (const r of recs) {
          if (!Number.isFinite(r.loss)) throw this.diverged(r.step, `loss became ${r.loss}`);
          h.record?.(r, ms);
        }
        await h.log?.(recs, ms);
        const step = recs[recs.length - 1].step;
        if (evalNow) {
          const e = await stepper.evaluate!(step);
          await h.eval?.(step, e);
        }
        if (ckptNow) {
          const why = await stepper.checkpoint!(done);
          if (why !== null) throw this.diverged(done - 1, why);
          this.lastGood = done;
        }
        await h.boundary?.(done);
        tLast = now(); // evaluation, checkpoints and pauses are not training time
      }
      if (stopNow) return { done, stopped: true };
      h.progress?.(done);
    }
    return { done: o.end, stopped: false };
  }

  private diverged(step: number, what: string): DivergenceError {
    return new DivergenceError(step, what, this.lastGood, this.o.dir);
  }
}
