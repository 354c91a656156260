/**
 * A rank's traffic in the terms of the plan (docs/design.md#communication-per-optimizer-step): the measured elements of
 * a step by parallel dimension, read in the terms of the prediction (derived_rows.ts), so the
 * accounting can set them side by side.
 */
import type { PlanDim } from './cost_types.ts';

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
