/**
 * ZeRO-2 and ZeRO-3 over a tensor-, context- or pipeline-parallel model (the mesh trainer's ZeRO
 * modes, src/parallel/zero/zero_sync.ts): every rank's (pp, tp) shard is sharded again over its dp·cp
 * group, and with pp the tied embedding's pieces are summed between first and last stage; under
 * the interleaved schedule each chunk reduces (and gathers) the units it finishes (reads first);
 * under --recompute full|selective the recomputing rule is one more use of its layer. Each
 * plan runs on in-process ranks sharing the test's GPU and is checked against the single-rank
 * run of the same config (same seed and global batch, 10 steps): losses within 1e-4 relative and
 * norms within 1e-3 on every rank, the gathered step-0 gradients by relative RMS, the final
 * parameters, and the elements each rank sends = cost.ts stepTraffic for the trainer, every row exact.
 */
import { deepStrictEqual, equal, ok, throws } from 'node:assert/strict';
import { closeLocalWorld, localWorld, onEveryRank } from '../../src/comm/local.ts';
import type { Communicator } from '../../src/comm/communicator.ts';
import type { Gpu } from '../../src/gpu/context.ts';
import { parseConfig, type TrainConfig } from '../../src/train/config.ts';
import { makePlan, type ParallelPlan, planMesh, planWorldSize } from '../../src/parallel/plan/plan.ts';
import { MeshTrainer } from '../../src/parallel/mesh/mesh_trainer.ts';
import { strategyOf } from '../../src/parallel/plan/strategy.ts';
import { planModelOf, sentByDim, trainerConfig } from '../../src/parallel/run/run.ts';
import { stepTraffic, trafficByKind } from '../../src/parallel/cost/cost.ts';
import { rankMemory } from '../../src/perf/memory_cost.ts';
import type { Sent } from '../../src/parallel/mesh/traffic.ts';
import { gpuTest } from '../util/gpu.ts';
import { assertClose, assertRelRms } from '../util/assert.ts';
import { maxRel, TEXT, tinyConfig } from './harness.ts';
import { flat, type Named, singleRankRun, tinyData } from './single_rank.ts';
import { gatherMesh } from './mesh_harness.ts';
import { plainConfig } from './mesh_rank.ts';

interface Result {
  losses: number[];
  gradNorms: number[];
  sent: Sent[];
  grads0: Named;
  params: Named;
  buckets: number[];
  spBuckets?: number[];
  /** Bytes of model state this rank holds, and the bytes of its whole tp shard (values only). */
  memory: { params: number; grads: number; shard: number };
}

/** One rank of a ZeRO-over-split run, built as run_build.ts builds it. */
async function zeroSplitRank(
  gpu: Gpu,
  world: Communicator,
  plan: ParallelPlan,
  over: Partial<TrainConfig>,
): Promise<Result> {
  const cfg = trainerConfig(plan, parseConfig(over));
  const { tok, data } = tinyData(TEXT, cfg.blockSize);
  const t = new MeshTrainer(gpu, cfg, plan, world, data, tok.vocabSize, { bucketBytes: 'layer' });
  const shard = t.stages.params.flatSize * 4, memory = t.memory();
  const res: Result = {
    losses: [],
    gradNorms: [],
    sent: [],
    grads0: {},
    params: {},
    buckets: t.sync.zero!.callSizes(),
    spBuckets: plan.sp ? t.sync.zero!.spCallSizes() : undefined,
    memory: { params: memory.params, grads: memory.grads, shard },
  };
  try {
    for (let s = 0; s < cfg.steps; s++) {
      const rec = await t.step(s);
      res.losses.push(rec.loss);
      res.gradNorms.push(rec.gradNorm);
      res.sent.push(rec.sent);
      if (s === 0) res.grads0 = Object.fromEntries(await t.gradients());
    }
    res.params = Object.fromEntries(await t.parameters());
  } finally {
    t.destroy();
  }
  return res;
}

const CASES: [string, Partial<TrainConfig>, Partial<ParallelPlan>][] = [
  // Four blocks, so that one layer's working slot plus the pieces is visibly less than the shard.
  ['gpt dp2 × tp2 × ZeRO-3', { nLayer: 4 }, { dp: 2, tp: 2, zero: 3 }],
  // Sequence parallelism: each unit's partial LayerNorm / bias gradients summed over tp before its reduce-scatter.
  // A global batch of 4 in 2 micro-batches: this 2-layer model's plain run on 8 rows hits a loss spike at step 9
  // whose ‖g‖ moves 1.3e-3 with the summation order alone (data_parallel.test.ts), past the norms' 1e-3.
  ['gpt dp2 × tp2 + sp × ZeRO-2', { batchSize: 2, gradAccum: 2 }, { dp: 2, tp: 2, sp: true, zero: 2, microBatches: 2 }],
  ['gpt dp2 × tp2 + sp × ZeRO-3', { nLayer: 4 }, { dp: 2, tp: 2, sp: true, zero: 3 }],
  // Two micro-batches: ZeRO-2 reduce-scatters each one's gradients and accumulates the pieces.
  ['gpt cp2 (ring) × tp2 × ZeRO-2', { batchSize: 2, gradAccum: 2 }, {
    cp: 2,
    tp: 2,
    zero: 2,
    cpKind: 'ring',
    microBatches: 2,
  }],
  // Each pipeline stage shards its own store over dp; the tied wte's pieces are summed between
  // the first and last stage. Eight blocks, so a stage's pieces plus one layer stay below its shard.
  ['gpt dp2 × pp2 (1F1B) × ZeRO-3', { nLayer: 8, gradAccum: 2 }, { dp: 2, pp: 2, zero: 3, microBatches: 2 }],
  // No biases: the planner leaves out each parameter's 256-byte alignment inside a unit, which
  // the 32-element biases of width 32 would pile up beyond the slack below.
  ['gpt dp2 × pp2 (GPipe) × ZeRO-2', { bias: false, gradAccum: 2 }, {
    dp: 2,
    pp: 2,
    zero: 2,
    schedule: 'gpipe',
    microBatches: 2,
  }],
  // Interleaved: a rank runs two chunks per micro-batch, each reduce-scattering (and at stage 3
  // gathering) only the units it uses; the tied wte's pieces are summed as with 1F1B.
  ['gpt dp2 × pp2 (interleaved, v 2) × ZeRO-2', { bias: false, nLayer: 4, gradAccum: 2 }, {
    dp: 2,
    pp: 2,
    zero: 2,
    schedule: 'interleaved',
    virtualStages: 2,
    microBatches: 2,
  }],
  ['gpt dp2 × pp2 (interleaved, v 2) × ZeRO-3', { nLayer: 8, gradAccum: 2 }, {
    dp: 2,
    pp: 2,
    zero: 3,
    schedule: 'interleaved',
    virtualStages: 2,
    microBatches: 2,
  }],
  ['gpt dp2 × ZeRO-3, recompute full', { nLayer: 4, recompute: 'full' }, { dp: 2, zero: 3 }],
  ['gpt dp2 × ZeRO-3, recompute selective', { nLayer: 4, recompute: 'selective', attention: 'naive' }, {
    dp: 2,
    zero: 3,
  }],
];

for (const [what, extra, p] of CASES) {
  gpuTest(
    `${what}: matches the single-rank run; traffic = stepTraffic exactly; model-state bytes = the planner's`,
    async (gpu) => {
      const over = tinyConfig(extra), plan = makePlan(p);
      equal(strategyOf(plan, 'gpt'), 'mesh', 'ZeRO-2/3 over tp / cp runs on the mesh trainer');
      // The reference: the plain run of the global batch, without recomputation (a recomputed ZeRO run must match it too).
      const ref = await singleRankRun(gpu, plainConfig({ ...over, recompute: 'none' }), TEXT);
      const world = localWorld(planWorldSize(plan), { timeoutMs: 120_000 });
      let res: Result[];
      try {
        res = await onEveryRank(world, (comm) => zeroSplitRank(gpu, comm, plan, over));
      } finally {
        closeLocalWorld(world);
      }
      const model = planModelOf(plan, trainerConfig(plan, parseConfig(over)), ref.vocabSize), bias = over.bias ?? true;
      for (const [r, x] of res.entries()) {
        ok(maxRel(x.losses, ref.losses) < 1e-4, `${what} rank ${r}: losses ${x.losses} vs ${ref.losses}`);
        ok(maxRel(x.gradNorms, ref.gradNorms) < 1e-3, `${what} rank ${r}: norms ${x.gradNorms} vs ${ref.gradNorms}`);
        const rows = stepTraffic(plan, model, r, {
          buckets: x.buckets,
          spBuckets: x.spBuckets,
          trainer: 'mesh',
          bias,
          recompute: parseConfig(over).recompute,
        });
        deepStrictEqual(rows.filter((row) => !row.exact).map((row) => row.what), [], `${what} rank ${r}: rows exact`);
        for (const [s, sent] of x.sent.entries()) {
          deepStrictEqual(
            sentByDim(sent),
            Object.fromEntries(trafficByKind(rows)),
            `${what} rank ${r} step ${s}: measured = stepTraffic`,
          );
        }
        if (plan.zero === 3) {
          ok(x.memory.params < x.memory.shard, `${what} rank ${r}: ZeRO-3 holds less than its tp shard's values`);
        }
        // npm run plan's model-state bytes: the tp shard's pieces and working buffers, up to the
        // 256-byte alignment of each piece and unit that the formula does not count.
        const predicted = rankMemory(plan, model, r, bias), slack = 4 * 64 * 2 * x.buckets.length;
        for (const k of ['params', 'grads'] as const) {
          const gap = x.memory[k] - predicted[k];
          ok(
            gap >= 0 && gap <= slack,
            `${what} rank ${r}: measured ${k} ${x.memory[k]} B vs predicted ${predicted[k]} B`,
          );
        }
      }
      const names = Object.keys(ref.grads0);
      const grads = gatherMesh(plan, res.map((x) => x.grads0), over, ref.vocabSize);
      assertRelRms(flat(grads, names), flat(ref.grads0, names), `${what}: step-0 gradients`);
      const params = gatherMesh(plan, res.map((x) => x.params), over, ref.vocabSize);
      assertClose(flat(params, names), flat(ref.params, names), `${what}: parameters after 10 steps`);
      // dp / cp replicas of a tp shard end equal (the gathered pieces are the same on each).
      const mesh = planMesh(plan);
      for (let r = 0; r < res.length; r++) {
        const c = mesh.coords(r);
        if (c.dp > 0 || c.cp > 0) deepStrictEqual(res[r].params, res[mesh.rankOf({ ...c, dp: 0, cp: 0 })].params);
      }
    },
  );
}

Deno.test('ZeRO-2/3 compose with every pipeline schedule, the hybrid over pp, sp and recomputation', () => {
  const interleaved = { schedule: 'interleaved', virtualStages: 2 } as const;
  equal(strategyOf(makePlan({ dp: 2, pp: 2, zero: 2, ...interleaved }), 'gpt'), 'mesh', 'interleaved (above)');
  equal(strategyOf(makePlan({ dp: 2, pp: 2, zero: 3 }), 'hybrid'), 'mesh', 'hybrid (arch_parity.test.ts)');
  equal(strategyOf(makePlan({ dp: 2, tp: 2, zero: 3, sp: true }), 'gpt'), 'mesh', 'ZeRO-3 composes with sp');
  equal(strategyOf(makePlan({ dp: 2, pp: 2, zero: 1 }), 'gpt'), 'mesh', 'ZeRO-1 composes with pipelines');
  equal(strategyOf(makePlan({ dp: 2, pp: 2, zero: 2 }), 'gpt'), 'mesh', 'and ZeRO-2/3 with 1F1B and GPipe');
  // Refused only where a plan is invalid whatever the ZeRO stage: the rule is named.
  throws(
    () => strategyOf(makePlan({ dp: 2, pp: 2, zero: 3, cp: 2 }), 'hybrid'),
    /cp 2 does not apply to --arch hybrid/,
  );
});
