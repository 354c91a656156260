/**
 * Data parallelism of the recurrent-depth model (docs/design.md §33): every rank draws the step's
 * r from (seed, step), so dp 2 reproduces the single-rank run of the same global batch — losses,
 * step-0 gradients and the parameters after 10 steps — with r varying between steps and the core
 * truncated. With --recompute full the core is one recomputed segment, and with a bucket per
 * parameter DDP launches each as soon as the last node reading it has run its backward.
 */
import { equal, ok } from 'node:assert/strict';
import { gpuTest } from '../util/gpu.ts';
import { assertClose, assertRelRms } from '../util/assert.ts';
import { maxRel, TEXT, tinyConfig } from './harness.ts';
import { singleRankRun } from './single_rank.ts';
import { microConfig } from './mesh_rank.ts';
import { localMeshRun } from './mesh_harness.ts';
import { makePlan, type ParallelPlan } from '../../src/parallel/plan.ts';
import { trainIterations } from '../../src/models/recurrence.ts';
import { parseConfig, type TrainConfig } from '../../src/train/config.ts';

// A bucket per parameter (4 bytes) with recomputation: each launches after its own last reader.
const CASES: [string, Partial<TrainConfig>, Partial<ParallelPlan>, number | undefined][] = [
  ['dp2', { nLayer: 3 }, { dp: 2 }, undefined],
  ['dp2, 2 micro-batches, recompute full, a bucket per parameter', { nLayer: 4, recompute: 'full' }, {
    dp: 2,
    microBatches: 2,
  }, 4],
];

for (const [what, over, p, bucketBytes] of CASES) {
  gpuTest(`recurrent-depth ${what} matches the single-rank run`, async (gpu) => {
    const cfg = tinyConfig({ arch: 'recurrent-depth', nEmbd: 16, recurIters: 3, recurBackprop: 2, ...over });
    const full = parseConfig(cfg), draws = Array.from({ length: full.steps }, (_, s) => trainIterations(full, s));
    ok(new Set(draws).size > 1 && draws.some((r) => r > 2), `r varies and exceeds k = 2 on some steps (${draws})`);
    const plan = makePlan(p), ref = await singleRankRun(gpu, microConfig(plan, { ...cfg, recompute: 'none' }), TEXT);
    const res = await localMeshRun(gpu, plan, cfg, TEXT, { bucketBytes });
    equal(res.length, 2);
    for (const [r, x] of res.entries()) {
      ok(maxRel(x.losses, ref.losses) < 1e-4, `rank ${r}: losses ${x.losses} vs ${ref.losses}`);
      // DDP's buckets allReduce the flat (aligned) gradient buffer: 2(d−1)/d·Ψ_flat = Ψ_flat per rank at d = 2.
      for (const sent of x.sent) {
        equal(sent['dp[0,1]/grads/allReduce'], x.flat, `rank ${r}: the gradients allReduced once`);
      }
      for (const [n, g] of Object.entries(ref.grads0)) {
        assertRelRms(x.grads0[n], g, `rank ${r}: step-0 gradient of ${n}`);
      }
      for (const [n, v] of Object.entries(ref.params)) assertClose(x.params[n], v, `rank ${r}: ${n} after 10 steps`);
    }
  });
}
