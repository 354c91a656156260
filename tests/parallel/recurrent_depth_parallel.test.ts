/**
 * Data and pipeline parallelism of the recurrent-depth model (docs/design.md#recurrent-depth-across-ranks): every rank
 * draws the step's r from (seed, step), so each plan reproduces the single-rank run of the same
 * global batch — losses, step-0 gradients and the parameters after 10 steps — with r varying
 * between steps and the core truncated. Pipeline stages split the P + 1 + Q pieces (the core,
 * every iteration of it, is one). With --recompute full the core is one recomputed segment, and
 * with a bucket per parameter DDP launches each as soon as the last node reading it has run its
 * backward.
 */
import { equal, ok, throws } from 'node:assert/strict';
import { gpuTest } from '../util/gpu.ts';
import { assertClose, assertRelRms } from '../util/assert.ts';
import { maxRel, TEXT, tinyConfig } from './harness.ts';
import { singleRankRun } from './single_rank.ts';
import { plainConfig } from './mesh_rank.ts';
import { localMeshRun } from './mesh_harness.ts';
import { makePlan, type ParallelPlan } from '../../src/parallel/plan/plan.ts';
import { checkMeshPlan } from '../../src/parallel/plan/mesh_plan.ts';
import { trainIterations } from '../../src/models/recurrence.ts';
import { parseConfig, type TrainConfig } from '../../src/train/config.ts';

// A bucket per parameter (4 bytes) with recomputation: each launches after its own last reader.
const CASES: [string, Partial<TrainConfig>, Partial<ParallelPlan>, number | undefined][] = [
  ['dp2', { nLayer: 3 }, { dp: 2 }, undefined],
  ['dp2, 2 micro-batches, recompute full, a bucket per parameter', { nLayer: 4, recompute: 'full' }, {
    dp: 2,
    microBatches: 2,
  }, 4],
  // Pieces: prelude | core; the last stage runs every core iteration and the head (wte's copy).
  ['pp2 (1F1B), 2 micro-batches', { nLayer: 3, codaLayers: 0 }, { pp: 2, microBatches: 2 }, undefined],
  // Pieces: prelude, core | coda, coda.
  ['dp2 × pp2 (GPipe)', { nLayer: 4, codaLayers: 2 }, { dp: 2, pp: 2, schedule: 'gpipe', microBatches: 2 }, undefined],
];

for (const [what, over, p, bucketBytes] of CASES) {
  gpuTest(`recurrent-depth ${what} matches the single-rank run`, async (gpu) => {
    const cfg = tinyConfig({ arch: 'recurrent-depth', nEmbd: 16, recurIters: 3, recurBackprop: 2, ...over });
    const full = parseConfig(cfg), draws = Array.from({ length: full.steps }, (_, s) => trainIterations(full, s));
    ok(new Set(draws).size > 1 && draws.some((r) => r > 2), `r varies and exceeds k = 2 on some steps (${draws})`);
    const plan = makePlan(p), ref = await singleRankRun(gpu, plainConfig({ ...cfg, recompute: 'none' }), TEXT);
    const res = await localMeshRun(gpu, plan, cfg, TEXT, { bucketBytes });
    const seen = new Set<string>();
    for (const [r, x] of res.entries()) {
      ok(maxRel(x.losses, ref.losses) < 1e-4, `rank ${r}: losses ${x.losses} vs ${ref.losses}`);
      if (plan.pp === 1) {
        // DDP's buckets allReduce the flat (aligned) gradient buffer: 2(d−1)/d·Ψ_flat = Ψ_flat per rank at d = 2.
        for (const sent of x.sent) {
          equal(sent['dp[0,1]/grads/allReduce'], x.flat, `rank ${r}: the gradients allReduced once`);
        }
      }
      for (const [n, g] of Object.entries(x.grads0)) {
        assertRelRms(g, ref.grads0[n], `rank ${r}: step-0 gradient of ${n}`);
      }
      for (const [n, v] of Object.entries(x.params)) assertClose(v, ref.params[n], `rank ${r}: ${n} after 10 steps`);
      Object.keys(x.params).forEach((n) => seen.add(n));
    }
    equal(seen.size, Object.keys(ref.params).length, 'the ranks together hold every parameter');
  });
}

Deno.test('recurrent-depth pp: the stages split P + 1 + Q pieces, and a split that does not divide them is refused by name', () => {
  const cfg = parseConfig({ ...tinyConfig({ arch: 'recurrent-depth', nLayer: 4 }), gradAccum: 2 });
  throws(
    () => checkMeshPlan(makePlan({ pp: 2, microBatches: 2 }), cfg, 11, 2),
    /recurrent-depth's stages split its pieces, preludeLayers \+ 1 .* = 1 \+ 1 \+ 1 = 3, not nLayer; 3 is not divisible by pp·v = 2/,
  );
  checkMeshPlan(makePlan({ pp: 2, microBatches: 2 }), { ...cfg, codaLayers: 0, nLayer: 3 }, 11, 2);
});
