/**
 * ZeRO stages 1, 2, 3 (the mesh trainer's gradient-sync modes, src/parallel/zero/zero_sync.ts) on 2
 * simulated ranks against the single-rank Trainer on the same global batch: losses within 1e-4
 * relative, global grad norms (hence clipping) within 1e-3, parameters after 10 steps within
 * 1e-4 + 1e-3·|ref| (docs/design.md#test-tolerances), traffic equal to the exact formula.
 *
 * Exact traffic, per step and rank, ring algorithms, d ranks, A micro-batches, buckets of n_k
 * elements padded to pieces of c_k = ⌈n_k/(64d)⌉·64 (C = Σ c_k, so d·C ≥ Ψ_flat):
 *   reduce-scatter (d−1)·C per pass: stage 1 one pass, stages 2–3 one per micro-batch;
 *   all-gather (d−1)·C per pass: stages 1–2 one (after the update), stage 3 two per micro-batch;
 *   scalars: the mesh trainer's one 2-element allReduce [‖g‖² share, loss share] over the world.
 * The ≈2(d−1)/d·Ψ of docs/design.md#communication-per-optimizer-step (stages 1–2, A = 1) and ≈3(d−1)/d·Ψ (stage 3) are
 * these with d·C ≈ Ψ.
 */
import { deepStrictEqual, equal, ok } from 'node:assert/strict';
import { testGpu } from '../util/gpu.ts';
import { assertClose, assertRelRms } from '../util/assert.ts';
import {
  maxRel,
  reference,
  ringAllReduceSent,
  type RunResult,
  TEXT,
  tinyConfig,
  withDpWorld,
  WORKER_TEST,
} from './harness.ts';

const D = 2;

const cases = [
  { stage: 1, gradAccum: 1, nLayer: 2, bucketBytes: 16 * 1024 },
  { stage: 2, gradAccum: 2, nLayer: 2, bucketBytes: 'layer' as const },
  // Four blocks, so that one layer plus the shard is visibly less than the whole model.
  { stage: 3, gradAccum: 1, nLayer: 4, bucketBytes: 'layer' as const },
  { stage: 3, gradAccum: 2, nLayer: 4, bucketBytes: 'layer' as const },
];

Deno.test({
  name:
    'ZeRO-1 / ZeRO-2 (gradAccum 2) / ZeRO-3 (per-layer gathers, gradAccum 1 and 2) on dp2 match the single-rank run; traffic and memory are exact',
  ...WORKER_TEST,
  fn: async () => {
    const gpu = await testGpu();
    const refs = new Map<string, Awaited<ReturnType<typeof reference>>>();
    const key = (c: { gradAccum: number; nLayer: number }) => `${c.gradAccum}/${c.nLayer}`;
    for (const c of cases) {
      if (!refs.has(key(c))) {
        refs.set(key(c), await reference(gpu, tinyConfig({ gradAccum: c.gradAccum, nLayer: c.nLayer })));
      }
    }
    ok(refs.get('1/2')!.gradNorms.some((n) => n > 0.5), 'clipping must be active on some step');
    await withDpWorld(D, async (w) => {
      for (const c of cases) {
        const what = `ZeRO-${c.stage} gradAccum ${c.gradAccum}`;
        const res = await w.run<RunResult>('train', {
          cfg: tinyConfig({ gradAccum: c.gradAccum, nLayer: c.nLayer }),
          text: TEXT,
          stage: c.stage,
          bucketBytes: c.bucketBytes,
        });
        const ref = refs.get(key(c))!;
        for (const r of res) {
          ok(maxRel(r.losses, ref.losses) < 1e-4, `${what}: losses ${r.losses} vs ${ref.losses}`);
          ok(maxRel(r.gradNorms, ref.gradNorms) < 1e-3, `${what}: grad norms ${r.gradNorms} vs ${ref.gradNorms}`);
        }
        assertRelRms(res[0].grads0!, ref.grads0, `${what}: averaged gradients of step 0`);
        assertClose(res[0].params!, ref.params, `${what}: parameters after 10 steps`);

        const { buckets, flat } = res[0];
        if (c.bucketBytes === 'layer') equal(buckets.length, 2 + c.nLayer + 1, `wte, wpe, ${c.nLayer} blocks, ln_f`);
        const C = buckets.reduce((s, n) => s + Math.ceil(n / (64 * D)) * 64, 0);
        const A = c.gradAccum;
        ok(
          D * C >= flat && D * C - flat < 64 * D * buckets.length,
          `padding stays below one 256-byte piece per bucket: d·C = ${D * C}, Ψ = ${flat}`,
        );
        for (const [rank, r] of res.entries()) {
          equal(r.shard, C);
          const want = {
            'dp[0,1]/grads/reduceScatter': (c.stage === 1 ? 1 : A) * (D - 1) * C,
            'dp[0,1]/params/allGather': (c.stage === 3 ? 2 * A : 1) * (D - 1) * C,
            'world/scalars/allReduce': ringAllReduceSent(2, D, rank),
          };
          for (const sent of r.sent) deepStrictEqual(sent, want, what);
          // docs/design.md#communication-per-optimizer-step counts passes over Ψ: A = 1 gives 2 (stages 1–2) and 3
          // (stage 3).
          const passes = (c.stage === 1 ? 1 : A) + (c.stage === 3 ? 2 * A : 1);
          const total = want['dp[0,1]/grads/reduceScatter'] + want['dp[0,1]/params/allGather'];
          const design = passes * (D - 1) / D * flat;
          ok(
            total >= design && total - design < passes * (D - 1) * 64 * buckets.length,
            `${what}: ${total} ≈ DESIGN ${design}`,
          );
          // What a rank allocates, summed from its buffers: fp32 values 4Ψ, grads 4Ψ, AdamW 8Ψ,
          // each sharded from its stage on; stages 2–3 add the working buffers of W = resident
          // units (wte, wpe, ln_f) + one layer, for gradients (and values at stage 3).
          const W = c.bucketBytes === 'layer'
            ? buckets[0] + buckets[1] + buckets.at(-1)! + Math.max(...buckets.slice(2, -1))
            : 0;
          deepStrictEqual(r.memory, {
            params: c.stage === 3 ? 4 * (C + W) : 4 * flat,
            grads: c.stage >= 2 ? 4 * (C + W) : 4 * flat,
            optimizer: 8 * C,
            working: (c.stage === 3 ? 8 : c.stage === 2 ? 4 : 0) * W,
          }, `${what}: bytes held per rank`);
          if (c.stage === 3) {
            ok(
              C + W < flat,
              `${what}: the shard plus one layer (${C + W}) must hold less than the whole model (${flat})`,
            );
          }
          ok(
            r.launched.every((n) => n === buckets.length),
            `${what}: every bucket reduce-scattered from inside backward`,
          );
        }
      }
    });
  },
});
