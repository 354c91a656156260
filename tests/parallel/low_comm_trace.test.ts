/**
 * Low-communication data parallelism in the run's own trace (trace.json's send spans, read back
 * by src/comm/trace_bytes.ts): under `--sync` no inner step carries the dp gradient allReduce;
 * the dp group sends only the outer allReduce, and only at the outer syncs (diloco, local SGD:
 * exactly the steps low_comm.ts `syncsAt` names and the last one) or while one is in flight
 * (streaming DiLoCo's overlap, CO2's one-round delay). DDP is the control: its dp gradient
 * allReduce runs in every step, under the key this test looks for.
 */
import { deepStrictEqual, ok } from 'node:assert/strict';
import { TEST, tracedRun } from './trace_harness.ts';
import { makePlan, type ParallelPlan } from '../../src/parallel/plan/plan.ts';
import { syncsAt, type SyncSpec, syncSpecOf } from '../../src/parallel/data/low_comm.ts';
import { type StepSends, traceSends } from '../../src/comm/trace_bytes.ts';

const STEPS = 8;

/** The steps whose send spans on a dp group carry `op` keys other than the outer allReduce, and those that carry the outer one. */
function dpSends(rows: StepSends[]): { inner: string[]; outerSteps: Set<number | null> } {
  const inner: string[] = [], outerSteps = new Set<number | null>();
  for (const r of rows) {
    for (const key of Object.keys(r.sent).filter((k) => k.startsWith('dp['))) {
      if (/^dp\[[\d,]+\]\/outer\//.test(key)) outerSteps.add(r.step);
      else inner.push(`rank ${r.rank} step ${r.step}: ${key}`);
    }
  }
  return { inner, outerSteps };
}

/** Steps at whose end an outer allReduce starts, each with the step its result lands (same step without overlap). */
function launches(spec: SyncSpec): [number, number][] {
  const out: [number, number][] = [];
  for (let s = 0; s < STEPS; s++) {
    const last = s + 1 === STEPS;
    if (spec.method === 'co2') {
      if ((s + 1) % spec.innerSteps === 0 || last) out.push([s, last ? s : s + spec.innerSteps]);
    } else if (last || syncsAt(spec, s).length) out.push([s, last ? s : s + spec.overlapSteps]);
  }
  return out;
}

Deno.test({
  name: 'low-comm trace: DDP sends the dp gradient allReduce in every step (the control)',
  ...TEST,
  fn: async () => {
    const { trace } = await tracedRun(makePlan({ dp: 2 }), { steps: 3, evalInterval: 3 });
    const rows = traceSends(trace).filter((r) => r.step !== null);
    for (const rank of [0, 1]) {
      deepStrictEqual(
        rows.filter((r) => r.rank === rank && Object.keys(r.sent).some((k) => /^dp\[0,1\]\/grads\//.test(k)))
          .map((r) => r.step),
        [0, 1, 2],
        `rank ${rank}`,
      );
    }
  },
});

Deno.test({
  name:
    'low-comm trace: no dp gradient allReduce in any inner step; the outer allReduce only at (or in flight from) a sync',
  ...TEST,
  fn: async () => {
    const cases: [Partial<ParallelPlan>, Record<string, unknown>][] = [
      [{ dp: 2, tp: 2 }, { sync: 'diloco', innerSteps: 3 }],
      [{ dp: 2 }, { sync: 'local-sgd', innerSteps: 3 }],
      [{ dp: 2 }, { sync: 'streaming-diloco', innerSteps: 4, fragments: 2, overlapSteps: 1 }],
      [{ dp: 2 }, { sync: 'co2', innerSteps: 3, outerClip: 1 }],
    ];
    for (const [base, o] of cases) {
      const spec = syncSpecOf(o as Parameters<typeof syncSpecOf>[0])!, what = JSON.stringify({ ...base, ...o });
      const { trace } = await tracedRun(makePlan({ ...base, sync: spec }), { steps: STEPS, evalInterval: STEPS });
      const { inner, outerSteps } = dpSends(traceSends(trace));
      deepStrictEqual(inner, [], `${what}: the dp group sends nothing but the outer allReduce`);
      const starts = launches(spec);
      if (spec.overlapSteps === 0 && spec.method !== 'co2') {
        // Without overlap the allReduce starts and lands inside the step that syncs.
        deepStrictEqual([...outerSteps].sort((a, b) => a! - b!), starts.map(([s]) => s), `${what}: outer steps`);
      } else {
        for (const s of outerSteps) {
          ok(
            s === null || starts.some(([from, due]) => from <= s && s <= due),
            `${what}: outer sends in step ${s}, outside every sync's flight ${JSON.stringify(starts)}`,
          );
        }
        ok(starts.every(([s]) => outerSteps.has(s)), `${what}: every sync sends (${[...outerSteps]})`);
      }
    }
  },
});
