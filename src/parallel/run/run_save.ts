/**
 * The rank side of a checkpoint that is checked before it is saved (the rules of
 * src/train/finite.ts): no rank's file is taken unless the whole world's state is finite, and
 * every rank learns that from one allReduce, so all of them agree.
 */
import { nonFiniteCount, type Probe } from '../../train/finite.ts';
import type { RankRun } from './run.ts';

/** What one rank answers to the host's `trainSave`. */
export interface RankSave {
  /** Non-finite values in this rank's state, and over the world (equal on every rank). */
  local: number;
  total: number;
  /** This rank's checkpoint file; null when `total` > 0. */
  bytes: Uint8Array | null;
  /** Loss and gradient norm of one more step from the saved state (equal on every rank), when asked. */
  probe: Probe | null;
}

/**
 * Counts the non-finite values of the state this rank saves (on its GPU), sums the counts over
 * the world, and when the sum is 0 encodes this rank's file. With `probe` — the run ends here
 * (its last step, or a stop), so no next step will test the saved state — it then runs one more
 * step from it, untraced, for its loss and gradient norm; the update that step makes is thrown
 * away with the run, which cannot step afterwards.
 * @throws (rejects with) GPU read errors and a peer's failure in the allReduce or the probe step.
 */
export async function checkedCheckpoint(run: RankRun, probe: boolean): Promise<RankSave> {
  await run.built.settle?.();
  const local = await nonFiniteCount(run.gpu, Object.values(run.state()));
  // Untraced, like the probe: the trace and the accounting hold the steps' messages only.
  const [total] = await untraced(run, () => run.world.allReduce(new Int32Array([local]), { op: 'sum' }));
  if (total > 0) return { local, total, bytes: null, probe: null };
  const bytes = await run.checkpoint();
  return { local, total, bytes, probe: probe ? await probeStep(run) : null };
}

/** Runs `fn` with this rank's tracer off. */
async function untraced<T>(run: RankRun, fn: () => Promise<T>): Promise<T> {
  const tracer = run.world.tracer, was = tracer.enabled;
  tracer.enabled = false;
  try {
    return await fn();
  } finally {
    tracer.enabled = was;
  }
}

/** One step from the current state with tracing off; the run is ended by it. */
function probeStep(run: RankRun): Promise<Probe> {
  run.ended = `step ${run.next} ran as a probe of the saved state`;
  return untraced(run, async () => {
    const r = await run.built.step(run.next);
    return { loss: r.loss, gradNorm: r.gradNorm, skipped: r.skipped };
  });
}
