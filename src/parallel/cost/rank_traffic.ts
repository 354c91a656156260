/**
 * A rank's traffic in the terms of the plan (docs/design.md#communication-per-optimizer-step): the measured elements of
 * a step by parallel dimension, and what the model's own code sends in a step over the meta GPU (derived_rows.ts), so the
 * accounting can set them side by side.
 */
import type { TrainConfig } from '../../train/config.ts';
import type { ParallelPlan } from '../plan/plan.ts';
import type { CommRow, PlanDim } from './cost_types.ts';
import { type DerivedRowsOptions, derivedTraffic } from './derived_rows.ts';

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
 * One step's predicted traffic of `rank`: the rows counted from the model (derived_rows.ts derivedTraffic) for the
 * config the rank trains with (`cfg`, trainerConfig applied) and its bucket size; for recurrent depth, of step `step`
 * (the r it draws), else of step 0.
 * @throws Error from MeshTrainer for a plan the model does not take.
 */
export function predictedTraffic(
  plan: ParallelPlan,
  cfg: TrainConfig,
  vocabSize: number,
  rank: number,
  o: DerivedRowsOptions = {},
): Promise<CommRow[]> {
  return derivedTraffic(cfg, plan, vocabSize, rank, o);
}
