/**
 * A rank's traffic in the terms of the plan (docs/design.md#communication-per-optimizer-step): the measured elements of
 * a step by parallel dimension, and what cost.ts `stepTraffic` predicts for the same rank and trainer, so the
 * accounting can set them side by side.
 */
import { rankGradMatrices } from '../data/grad_compression.ts';
import { trainIterations } from '../../models/recurrence.ts';
import type { TrainConfig } from '../../train/config.ts';
import type { ParallelPlan, PlanModel, StrategyKind } from '../plan/plan.ts';
import { type CommRow, type PlanDim, stepTraffic, type TrafficOptions } from './cost.ts';

/** The parallel dimension of a measured `group/op` key (groups name their dimension; `world`, `dpcp[…]`, `edp[…]` are dp). */
export function dimOfKey(key: string): PlanDim {
  const m = /^(dp|pp|cp|tp|ep)\[/.exec(key);
  if (m) return m[1] as PlanDim;
  // The mesh's tied-embedding and shared-block groups span pipeline ranks (cost.ts counts them under pp).
  if (key.startsWith('embedding[') || key.startsWith('shared[')) return 'pp';
  return 'dp';
}

/** Elements per `dim/collective` of a measured `group/op` map (traffic.ts Sent). */
export function sentByDim(sent: Record<string, number>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [k, n] of Object.entries(sent)) {
    const key = `${dimOfKey(k)}/${k.split('/').pop()}`;
    out[key] = (out[key] ?? 0) + n;
  }
  return out;
}

/**
 * One step's predicted traffic of `rank`: cost.ts stepTraffic with the trainer's buckets and scalar
 * collectives; for recurrent depth, of step `step` (its drawn r), or at the mean r without one.
 */
export function predictedTraffic(
  kind: StrategyKind,
  plan: ParallelPlan,
  model: PlanModel,
  cfg: TrainConfig,
  rank: number,
  sizes: Pick<TrafficOptions, 'buckets' | 'expertBuckets' | 'spBuckets' | 'sharedPieces'> = {},
  step?: number,
): CommRow[] {
  return stepTraffic(plan, model, rank, {
    ...sizes,
    // Recurrent depth: the r drawn at `step` sets its tp and cp traffic (unknown without a step: r̄, inexact).
    ...(cfg.arch === 'recurrent-depth' && step !== undefined && { coreIterations: trainIterations(cfg, step) }),
    bias: cfg.bias,
    topK: cfg.moeTopK,
    capacityFactor: cfg.capacityFactor,
    moeEvery: cfg.moeEvery,
    trainer: kind,
    recompute: cfg.recompute,
    gradMatrices: plan.compress?.dp.kind === 'powersgd'
      ? rankGradMatrices(cfg, model.vocabSize, plan, rank)
      : undefined,
  });
}
