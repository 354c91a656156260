/**
 * Compute on the simulated clock (docs/design.md#low-communication-data-parallelism): under a network model with a
 * modelled peak (`--net …;peak=<GFLOP/s>`) each forward and backward a pipeline rank runs advances its clock by the
 * performance model's time for that action (src/perf/step_time.ts `actionSeconds` on a device that runs every GEMM and
 * attention core at the peak), so a measured step and a predicted one price compute alike and differ only where the
 * engine's messages, overlap and bubbles differ from the model's. The model's shapes are GPT's; other architectures are
 * priced as a GPT block of the same width. Without a peak the clock counts messages only.
 */
import type { TrainConfig } from '../train/config.ts';
import type { ParallelPlan } from './plan.ts';
import { actionSeconds } from '../perf/step_time.ts';
import { flatProfile } from '../perf/device_profile.ts';
import type { SimClock } from '../comm/network.ts';
import { wallMs } from '../comm/trace.ts';
import type { Span } from './pipeline_sim.ts';
import type { SpanFn } from './pipeline_executor.ts';

/** µs of a forward and of a backward of one micro-batch, for a middle stage and for the last (LM head). */
export interface ActionUs {
  mid: { forward: number; backward: number };
  last: { forward: number; backward: number };
}

/**
 * The per-action compute of a rank of `plan` training `cfg` (its micro-batch config: batchSize per
 * micro-batch, gradAccum = micro-batches) at `peakGflops`.
 */
export function simActionUs(cfg: TrainConfig, plan: ParallelPlan, vocabSize: number, peakGflops: number): ActionUs {
  const model = {
    nLayer: cfg.nLayer,
    nHead: cfg.nHead,
    nEmbd: cfg.nEmbd,
    blockSize: cfg.blockSize,
    batchSize: cfg.batchSize * cfg.gradAccum,
    vocabSize,
  };
  const o = { dtype: 'f32' as const, recompute: cfg.recompute, attention: 'flash' as const };
  const dev = flatProfile(peakGflops * 1e9),
    us = (x: { forward: number; backward: number }) => ({
      forward: x.forward * 1e6,
      backward: x.backward * 1e6,
    });
  return { mid: us(actionSeconds(plan, model, o, dev, false)), last: us(actionSeconds(plan, model, o, dev, true)) };
}

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
