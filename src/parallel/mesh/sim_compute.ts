/**
 * Compute on the simulated clock (docs/design.md#low-communication-data-parallelism): under a network model with a
 * modelled peak (`--net …;peak=<GFLOP/s>`) each forward and backward a pipeline rank runs advances its clock by the
 * performance model's time for that action ({@link PriceActions}, which the caller passes: src/perf/action_prices.ts),
 * so a measured step and a predicted one price compute alike and differ only where the engine's messages, overlap and
 * bubbles differ from the model's. Without a peak the clock counts messages only.
 */
import type { TrainConfig } from '../../train/config.ts';
import type { ParallelPlan } from '../plan/plan.ts';
import type { SimClock } from '../../comm/network.ts';
import { wallMs } from '../../comm/trace.ts';
import type { Span } from '../pipeline/pipeline_sim.ts';
import type { SpanFn } from '../pipeline/pipeline_executor.ts';

/** µs of a forward and of a backward of one micro-batch, for a middle stage and for the last (LM head). */
export interface ActionUs {
  mid: { forward: number; backward: number };
  last: { forward: number; backward: number };
}

/**
 * The performance model's µs per action of a rank of `plan` training `cfg` (its micro-batch config) at `peakGflops`
 * GFLOP/s: src/perf/action_prices.ts `simActionUs`, passed in from above because src/perf sits above src/parallel
 * (docs/design.md#layers).
 */
export type PriceActions = (cfg: TrainConfig, plan: ParallelPlan, vocabSize: number, peakGflops: number) => ActionUs;

/**
 * The span function of one step (pipeline_executor.ts SpanFn): each span goes into `timeline`, ms
 * from `t0`; with `sim`, a forward or backward of stage s (of S) also moves `clock` by its compute.
 */
export function stepRecorder(timeline: Span[], t0: number, clock: SimClock, sim: ActionUs | null, S: number): SpanFn {
  return (kind, start, label, action) => {
    timeline.push({ kind, start: start - t0, end: wallMs() - t0, label, action });
    const k = action?.kind;
    if (sim && (k === 'forward' || k === 'backward')) clock.compute((action!.stage === S - 1 ? sim.last : sim.mid)[k]);
  };
}
