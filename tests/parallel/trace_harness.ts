/**
 * Runs a parallel plan the way the CLI does (src/parallel/run/run.ts `trainRank` on every rank) in
 * one thread (localWorld), merges the ranks' spans into the Chrome trace a run's trace.json
 * holds, and compares what the trace says each rank sent per step with the TrafficMeter and
 * with cost.ts `stepTraffic` (the summary's `predicted`).
 */
import '../util/plane.ts';
import type { DataPlane } from '../../src/comm/data_plane.ts';
import { closeLocalWorld, localWorld, onEveryRank } from '../../src/comm/local.ts';
import { type ChromeTrace, toChromeTrace } from '../../src/comm/trace.ts';
import { isValidationKey, sentElements, traceSends } from '../../src/comm/trace_bytes.ts';
import type { TrainConfig } from '../../src/train/config.ts';
import { type ParallelPlan, planWorldSize } from '../../src/parallel/plan/plan.ts';
import { type RankSummary, sentByDim } from '../../src/parallel/run/run.ts';
import { trainRank } from '../../src/parallel/run/run_tasks.ts';
import type { CommRow } from '../../src/parallel/cost/cost.ts';
import { TEXT, tinyConfig } from './harness.ts';
import { testBackend } from '../util/gpu.ts';

export const TEST = { sanitizeResources: false, sanitizeOps: false };

/** `steps` (default 2) steps of `plan` on a tiny GPT; returns every rank's summary and the trace, JSON round-tripped as in trace.json. */
export async function tracedRun(
  plan: ParallelPlan,
  over: Partial<TrainConfig> = {},
  dataPlane: DataPlane = 'message',
): Promise<{ ranks: RankSummary[]; trace: ChromeTrace }> {
  const world = localWorld(planWorldSize(plan), { timeoutMs: 60_000, dataPlane });
  try {
    const cfg = tinyConfig({ steps: 2, evalInterval: 2, evalBatches: 1, ...over });
    const ranks = await onEveryRank(
      world,
      (c) => trainRank({ plan, cfg, data: { text: TEXT }, backend: testBackend() }, c),
    );
    const trace = toChromeTrace(world.flatMap((c) => c.tracer.spans), { plan, kind: ranks[0].kind });
    return { ranks, trace: JSON.parse(JSON.stringify(trace)) };
  } finally {
    closeLocalWorld(world);
  }
}

/** Predicted elements per `dim/collective` (rows summed) and whether every row under it is exact. */
export function predictedByDim(rows: readonly CommRow[]): Map<string, { n: number; exact: boolean }> {
  const pred = new Map<string, { n: number; exact: boolean }>();
  for (const r of rows) {
    const k = `${r.dim}/${r.collective}`, p = pred.get(k) ?? { n: 0, exact: true };
    pred.set(k, { n: p.n + r.elements, exact: p.exact && r.exact });
  }
  return pred;
}

/**
 * Every disagreement between the trace and the run, as lines: per rank and step, the trace's
 * elements per `dim/collective` against the prediction (every row must be exact, an
 * approximate one is itself reported), its elements per `group/op` against the TrafficMeter's
 * record, and any send outside the steps the run reported. [] when the trace accounts exactly.
 * @throws what trace_bytes.ts `traceSends` throws for a malformed trace.
 */
export function traceMismatches(ranks: readonly RankSummary[], trace: unknown): string[] {
  const rows = traceSends(trace), out: string[] = [];
  for (const s of ranks) {
    const pred = predictedByDim(s.predicted);
    for (const [k, p] of pred) if (!p.exact) out.push(`rank ${s.rank} ${k}: the prediction is approximate`);
    const steps = new Set(s.records.map((r) => r.step));
    for (const r of rows) {
      // ZeRO-3's validation gathers (group `eval`) run between steps, outside their accounting.
      const sent = Object.fromEntries(Object.entries(r.sent).filter(([k]) => !isValidationKey(k)));
      if (r.rank === s.rank && !steps.has(r.step as number) && Object.keys(sent).length) {
        out.push(
          `rank ${s.rank}: trace has sends at step ${r.step}, which the run did not report: ${JSON.stringify(sent)}`,
        );
      }
    }
    for (const rec of s.records) {
      const traced = sentElements(rows, s.rank, rec.step), dims = sentByDim(traced);
      for (const k of new Set([...pred.keys(), ...Object.keys(dims)])) {
        const want = pred.get(k)?.n ?? 0, got = dims[k] ?? 0;
        if (want !== got) out.push(`rank ${s.rank} step ${rec.step} ${k}: predicted ${want}, trace ${got}`);
      }
      for (const k of new Set([...Object.keys(rec.sent), ...Object.keys(traced)])) {
        if ((rec.sent[k] ?? 0) !== (traced[k] ?? 0)) {
          out.push(`rank ${s.rank} step ${rec.step} ${k}: meter ${rec.sent[k] ?? 0}, trace ${traced[k] ?? 0}`);
        }
      }
    }
  }
  return out;
}
