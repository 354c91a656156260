/**
 * src/train/loop.ts over a fake stepper (no GPU): which steps it drains at, evaluates after and
 * checkpoints after, where a stop request ends it, and the DivergenceError of a NaN loss.
 */
import { deepStrictEqual, ok, rejects, throws } from 'node:assert/strict';
import { type LoopOptions, type LoopRecord, type Stepper, TrainingLoop } from '../../src/train/loop.ts';
import { DivergenceError } from '../../src/train/finite.ts';
import { isCheckpointStep } from '../../src/train/checkpoint.ts';

/** A stepper that records every call; step `nanAt` reports a NaN loss, checkpoint `badAt` is refused. */
function fake(o: { nanAt?: number; badAt?: number } = {}) {
  const calls: string[] = [];
  let pending: LoopRecord[] = [];
  const stepper: Stepper<LoopRecord, number> = {
    step: (s) => {
      calls.push(`step ${s}`);
      pending.push({ step: s, loss: s === o.nanAt ? NaN : 1 / (s + 1) });
      return Promise.resolve();
    },
    drain: () => {
      calls.push(`drain ${pending.map((r) => r.step).join(',')}`);
      const out = pending;
      pending = [];
      return Promise.resolve(out);
    },
    evaluate: (step) => {
      calls.push(`eval ${step}`);
      return Promise.resolve(step / 100);
    },
    checkpoint: (done) => {
      calls.push(`ckpt ${done}`);
      return Promise.resolve(done === o.badAt ? 'the state is bad' : null);
    },
  };
  return { stepper, calls };
}

/** The DivergenceError `run` rejects with. @throws AssertionError when it resolves or rejects otherwise. */
async function divergence(run: () => Promise<unknown>): Promise<DivergenceError> {
  try {
    await run();
  } catch (e) {
    ok(e instanceof DivergenceError, `expected a DivergenceError, got ${e}`);
    return e;
  }
  throw new Error('expected a DivergenceError, the loop ended normally');
}

/** The calls other than `step N`. */
const events = (calls: string[]) => calls.filter((c) => !c.startsWith('step '));

function loop<R extends LoopRecord>(stepper: Stepper<R, number>, o: Partial<LoopOptions<R, number>>) {
  return new TrainingLoop(stepper, { start: 0, end: 10, logInterval: 4, evalInterval: 0, ...o });
}

Deno.test('training loop: drains every log interval and after the last step, each record handed on once', async () => {
  const { stepper, calls } = fake();
  const seen: number[] = [], logs: number[][] = [];
  const r = await loop(stepper, {
    hooks: { record: (rec) => void seen.push(rec.step), log: (recs) => void logs.push(recs.map((x) => x.step)) },
  }).run();
  deepStrictEqual(r, { done: 10, stopped: false });
  deepStrictEqual(events(calls), ['drain 0,1,2,3', 'drain 4,5,6,7', 'drain 8,9']);
  deepStrictEqual(seen, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
  deepStrictEqual(logs, [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]);
  deepStrictEqual(calls.filter((c) => c.startsWith('step ')).length, 10);
});

Deno.test('training loop: evaluates every evalInterval steps and after the last, checkpoints where asked, from a resume', async () => {
  const { stepper, calls } = fake();
  const evals: [number, number][] = [];
  const l = loop(stepper, {
    start: 2,
    end: 11,
    logInterval: 100,
    evalInterval: 3,
    checkpointAt: (done) => isCheckpointStep(done, 11, 4, 'interval'),
    lastGood: 2,
    hooks: { eval: (step, v) => void evals.push([step, v]) },
  });
  await l.run();
  // Steps done 3, 6, 9 evaluate (step 2, 5, 8), as does the last (10); 4 and 8 checkpoint, as does the end (11).
  deepStrictEqual(events(calls), [
    'drain 2',
    'eval 2',
    'drain 3',
    'ckpt 4',
    'drain 4,5',
    'eval 5',
    'drain 6,7',
    'ckpt 8',
    'drain 8',
    'eval 8',
    'drain 9,10',
    'eval 10',
    'ckpt 11',
  ]);
  deepStrictEqual(evals, [[2, 0.02], [5, 0.05], [8, 0.08], [10, 0.1]]);
  deepStrictEqual(l.lastGood, 11);
});

Deno.test('training loop: a stop request ends the run at that step boundary, drained and checkpointed', async () => {
  const { stepper, calls } = fake();
  const progress: number[] = [];
  let stepsRun = 0;
  const r = await loop(stepper, {
    shouldStop: () => stepsRun === 6,
    hooks: { afterStep: () => Promise.resolve(void stepsRun++), progress: (d) => void progress.push(d) },
  }).run();
  deepStrictEqual(r, { done: 6, stopped: true });
  deepStrictEqual(calls.at(-3), 'step 5');
  deepStrictEqual(events(calls), ['drain 0,1,2,3', 'drain 4,5', 'ckpt 6']);
  deepStrictEqual(progress, [1, 2, 3, 4, 5]); // the stopped step is reported by the caller, not as progress
});

Deno.test('training loop: a NaN loss is a DivergenceError naming its step and the last good checkpoint', async () => {
  const { stepper, calls } = fake({ nanAt: 6 });
  const seen: number[] = [];
  const l = loop(stepper, {
    checkpointAt: (done) => done === 4,
    dir: 'runs/x',
    hooks: { record: (r) => void seen.push(r.step) },
  });
  const e = await divergence(() => l.run());
  deepStrictEqual([e.step, e.lastGood, e.dir], [6, 4, 'runs/x']);
  ok(e.message.startsWith('step 6: loss became NaN; the last good checkpoint (step 4) in runs/x is kept'), e.message);
  deepStrictEqual(seen, [0, 1, 2, 3, 4, 5]); // records before the bad one were handed on
  deepStrictEqual(events(calls).at(-1), 'drain 4,5,6,7');
});

Deno.test('training loop: a refused checkpoint is a DivergenceError and leaves lastGood at the previous one', async () => {
  const { stepper } = fake({ badAt: 8 });
  const l = loop(stepper, { checkpointAt: (done) => done % 4 === 0 });
  const e = await divergence(() => l.run());
  deepStrictEqual([e.step, e.what, e.lastGood], [7, 'the state is bad', 4]);
  deepStrictEqual(l.lastGood, 4);
});

Deno.test('training loop: without evaluate or checkpoint it only drains; bad intervals are refused', async () => {
  const { stepper, calls } = fake();
  const bare: Stepper<LoopRecord, number> = { step: stepper.step, drain: stepper.drain };
  await loop(bare, { evalInterval: 2, checkpointAt: () => true, shouldStop: () => false }).run();
  deepStrictEqual(events(calls), ['drain 0,1,2,3', 'drain 4,5,6,7', 'drain 8,9']);
  throws(() => loop(bare, { logInterval: 0 }), /logInterval must be an integer ≥ 1, got 0/);
  throws(() => loop(bare, { start: 5, end: 4 }), /start 5 and end 4/);
  const empty: Stepper<LoopRecord, number> = { step: () => Promise.resolve(), drain: () => Promise.resolve([]) };
  await rejects(() => loop(empty, {}).run(), /drained the records of steps \[\] for steps 0…3$/);
});

/**
 * A stepper whose steps run at the drain, as a parallel run's ranks do: its ranks stop early when
 * `stopAt` is reached, and it writes a checkpoint only once the next step's record shows it good.
 */
function batched(o: { stopAt?: number; badAfter?: number }) {
  const calls: string[] = [];
  let asked = 0, ran = 0, pending: number | null = null, stopped = false;
  const stepper: Stepper<LoopRecord & { gradNorm: number }, number> = {
    lastGood: null,
    step: (s) => Promise.resolve(void (asked = s + 1)),
    drain() {
      stopped = o.stopAt !== undefined && asked > o.stopAt;
      const to = stopped ? o.stopAt! : asked;
      const out = [];
      for (; ran < to; ran++) {
        out.push({ step: ran, loss: 1, gradNorm: ran === o.badAfter ? Infinity : 1 });
        if (pending === ran) {
          this.lastGood = pending;
          calls.push(`commit ${pending}`);
          pending = null;
        }
      }
      calls.push(`drain ${asked} ran ${ran}`);
      return Promise.resolve(out);
    },
    checkpoint(done, final) {
      calls.push(`ckpt ${done}${final ? ' final' : ''}`);
      if (final) this.lastGood = done;
      else pending = done;
      return Promise.resolve(null);
    },
  };
  return { stepper, calls, stopped: () => stopped };
}

Deno.test('training loop: a drain may end short at a stop its ranks agreed on; that boundary is checkpointed as final', async () => {
  const { stepper, calls, stopped } = batched({ stopAt: 6 });
  const l = loop(stepper, { checkpointAt: (d) => d === 4, shouldStop: stopped });
  deepStrictEqual(await l.run(), { done: 6, stopped: true });
  // Asked for 8 steps, the ranks ran 6: the run stops after 6, checkpointed (final) there.
  deepStrictEqual(calls, ['drain 4 ran 4', 'ckpt 4', 'commit 4', 'drain 8 ran 6', 'ckpt 6 final']);
  deepStrictEqual(l.lastGood, 6);
  const { stepper: early } = batched({ stopAt: 6 });
  await rejects(() => loop(early, {}).run(), /drained the records of steps \[4, 5\] for steps 4…7$/);
});

Deno.test("training loop: a stepper's own lastGood and divergence test name the checkpoint written", async () => {
  const { stepper } = batched({ badAfter: 5 });
  const l = loop(stepper, {
    checkpointAt: (d) => d === 4,
    diverged: (r) => (Number.isFinite(r.gradNorm) ? null : `gradient norm ${r.gradNorm}`),
  });
  const e = await divergence(() => l.run());
  // The checkpoint after 4 steps was committed when step 4's record arrived, before step 5 diverged.
  deepStrictEqual([e.step, e.what, e.lastGood], [5, 'gradient norm Infinity', 4]);
});
