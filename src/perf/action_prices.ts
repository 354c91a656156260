/**
 * The performance model's price of one forward and one backward of a micro-batch, in µs, for the simulated clock of a
 * rank (docs/design.md#low-communication-data-parallelism): src/perf/step_time.ts `actionSeconds` on a device that
 * runs every GEMM and attention core at the network model's peak (`--net …;peak=<GFLOP/s>`). The model's shapes are
 * GPT's; other architectures are priced as a GPT block of the same width. A rank's trainer (src/parallel) takes this
 * function as a parameter (`PriceActions`), {@link simActionUs} being the one the worker and the MPI host pass, because src/perf sits
 * above src/parallel (docs/design.md#layers).
 */
import type { TrainConfig } from '../train/config.ts';
import type { ParallelPlan } from '../parallel/plan/plan.ts';
import type { ActionUs } from '../parallel/mesh/sim_compute.ts';
import { actionSeconds } from './step_time.ts';
import { flatProfile } from './device_profile.ts';

/**
 * The per-action compute of a rank of `plan` training `cfg` (its micro-batch config: batchSize per
 * micro-batch, gradAccum = micro-batches) at `peakGflops` (GFLOP/s), in µs.
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
