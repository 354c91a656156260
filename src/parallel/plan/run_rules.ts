/**
 * The rules of rule_table.ts's table that read the run's config (rules.ts RunFacts) rather than the plan's degrees:
 * what the mesh trainer refuses whatever the split (docs/design.md#parallel-training).
 */
import type { PlanRule } from './rules.ts';

/** What the mesh trainer refuses of a run's config whatever the plan's degrees. */
export const RUN_RULES: PlanRule[] = [
  {
    id: 'ring-needs-f32',
    group: 'run',
    needs: 'run',
    check: ({ plan: { cp, cpKind }, run: { precision: p } }) =>
      p !== undefined && p !== 'f32' && cp > 1 && cpKind === 'ring'
        ? `mesh trainer: --precision ${p} with ring attention (its block kernels read f32 q, k, v; use --cp-kind ulysses) is not supported`
        : null,
  },
  {
    id: 'no-topk-attention',
    group: 'run',
    needs: 'run',
    check: ({ run: { topkAttention: k } }) =>
      k ? `mesh trainer: --topk-attention ${k} (evaluation of single-rank runs only) is not supported` : null,
  },
  {
    id: 'no-goldfish',
    group: 'run',
    needs: 'run',
    check: ({ run: { goldfishK: k } }) =>
      k
        ? `goldfishK must be 0 in a parallel run: uneven target counts per micro-batch would break the mean over micro-batches`
        : null,
  },
  {
    id: 'no-neftune',
    group: 'run',
    needs: 'run',
    check: ({ run: { neftuneAlpha: a } }) =>
      a ? 'neftuneAlpha must be 0 in a parallel run (the noise is seeded per full batch)' : null,
  },
];
