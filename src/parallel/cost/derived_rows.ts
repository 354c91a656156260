/**
 * A rank's per-step traffic rows counted from the model (docs/design.md#accounting-derived-from-the-model): the calls
 * derived_traffic.ts counts in one real step over the meta GPU, written as the rows the accounting, `npm run plan` and
 * the demo print ({@link CommRow}). Nothing here knows an architecture: a row is one (group, op, buffer size) the
 * model's code called, named by the purpose its group was made for (`tp[0,1]/act`, `dp[0,1]/grads`, …).
 *
 * A compressing plan's step runs its compressed collectives (comm/compressed.ts) and PowerSGD, so its rows count the
 * words they send; the low-communication outer sync, which a step makes only every H steps, is added as its average
 * per step (low_comm.ts outerSyncRows), as the analytical model does.
 */
import type { TrainConfig } from '../../train/config.ts';
import type { CountedCall } from '../../comm/counting.ts';
import type { Algorithm } from '../../comm/call_options.ts';
import { ALGORITHMS, type Collective } from '../../comm/call_options.ts';
import { type ParallelPlan, planGroup } from '../plan/plan.ts';
import { outerSyncRows } from '../data/low_comm.ts';
import { derivedRankParams } from './derived_params.ts';
import { compresses, formatScheme } from '../../comm/compression.ts';
import { derivedStepTraffic, type DerivedTrafficOptions } from './derived_traffic.ts';
import { dimOfKey } from './rank_traffic.ts';
import type { CommRow, TrafficOptions } from './cost_types.ts';
import { callAlgorithm } from './cost.ts';
import { collectiveTraffic } from '../../comm/cost.ts';

/** What the calls of a group made for `purpose` move, and which compression policy reaches them (compressed_rows.ts). */
const PURPOSES: Record<string, { what: string; bulk?: CommRow['bulk'] }> = {
  act: { what: 'activations and their gradients (tensor parallel)', bulk: 'act' },
  ce: { what: 'vocab-parallel cross-entropy (max, target, sum-exp)' },
  attn: { what: 'attention K, V and their gradients (context parallel)', bulk: 'act' },
  moe: { what: 'MoE dispatch + combine', bulk: 'act' },
  grads: { what: 'dense gradients', bulk: 'dense' },
  experts: { what: 'expert gradients', bulk: 'expert' },
  'sp-grads': { what: 'sequence-parallel partial gradients of the replicated parameters' },
  params: { what: 'parameters (ZeRO)' },
  scalars: { what: 'gradient norm + loss over the world' },
};

/** The row of one counted call kind: its dimension, purpose and compression reach read from the group id. */
export function callRow(c: CountedCall): CommRow {
  const [base, ...rest] = c.group.replace(/:p2p$/, '').split('/'), purpose = rest[0] ?? '';
  let { what, bulk } = PURPOSES[purpose] ?? { what: `${base} ${c.op}` };
  if (base.startsWith('embedding[')) what = 'tied embedding gradients';
  else if (base.startsWith('shared[')) what = 'shared block gradients (every stage holds it)';
  else if (base.startsWith('pp[')) {
    ({ what, bulk } = { what: 'activations (fwd) and their gradients (bwd)', bulk: 'act' });
  }
  // An expert-data-parallel group syncs the experts: the gradients of its buckets are the expert bulk.
  if (base.startsWith('edp[') && bulk === 'dense') ({ what, bulk } = PURPOSES.experts);
  const collective = c.op as CommRow['collective'];
  const algorithm: Algorithm | 'p2p' = collective === 'send' ? 'p2p' : ALGORITHMS[collective as Collective][0];
  return {
    dim: dimOfKey(c.group),
    what,
    collective,
    algorithm,
    group: c.ranks,
    calls: c.calls,
    n: c.n,
    elements: c.elements,
    messages: c.messages,
    exact: true,
    ...(bulk && { bulk }),
  };
}

/** Options of {@link derivedTraffic}: the step and trainer choices of derived_traffic.ts. */
export type DerivedRowsOptions = DerivedTrafficOptions;

/**
 * The rows of everything rank `rank` of `plan` sends in optimizer step `o.step` of `cfg` (the config the rank trains
 * with: trainerConfig applied), counted from the model (see the module doc), compressed as the plan's policy
 * compresses them (bulk rows name the scheme). Every row is exact except the outer sync's per-step average.
 * @throws Error from MeshTrainer for a plan the model does not take.
 */
export async function derivedTraffic(
  cfg: TrainConfig,
  plan: ParallelPlan,
  vocabSize: number,
  rank: number,
  o: DerivedRowsOptions = {},
): Promise<CommRow[]> {
  const d = await derivedStepTraffic(cfg, plan, vocabSize, rank, o);
  const rows = d.calls.filter((c) => !c.group.includes('/outer')).map(callRow);
  if (plan.sync) {
    const dense = derivedRankParams(cfg, vocabSize)(plan, rank).dense;
    const group = planGroup(plan, 'dp', rank).flatMap((r) => planGroup(plan, 'cp', r));
    rows.push(...outerSyncRows(plan.sync, dense, group, rank));
  }
  if (!compresses(plan.compress)) return rows;
  // The compressed calls were counted as the compressed collectives make them: name the scheme on the bulk rows.
  return rows.map((r) => {
    const s = r.bulk && plan.compress![r.dim];
    return s && s.kind !== 'none' ? { ...r, scheme: formatScheme(s) } : r;
  });
}

/**
 * `rows` of rank `rank` priced as if every collective ran `algorithm` (the nearest one each collective accepts,
 * cost.ts callAlgorithm): `npm run plan --algorithm`'s what-if; sends are unchanged. Absent: the rows themselves.
 */
export function repriced(rows: CommRow[], algorithm: TrafficOptions['algorithm'], rank: number): CommRow[] {
  if (!algorithm) return rows;
  return rows.map((r) => {
    if (r.collective === 'send' || r.scheme) return r;
    const a = callAlgorithm(r.collective, algorithm),
      tr = collectiveTraffic(r.collective, a, r.n, r.group.length, r.group.indexOf(rank));
    return { ...r, algorithm: a, elements: tr.elements * r.calls, messages: tr.messages * r.calls };
  });
}
