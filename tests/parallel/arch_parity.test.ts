/**
 * Every architecture written once (src/models/context.ts): tensor and pipeline parallelism of the
 * recurrent models run the models' own embed / block / head pieces over a RankContext, with the
 * role of each parameter from src/parallel/tensor/tp_table.ts. Each plan is checked against the
 * single-rank run of the same architecture (same seed and global batch, 10 steps): losses within
 * 1e-4 relative, the gathered step-0 gradients by relative RMS, the final parameters.
 */
import { deepStrictEqual, equal, ok, throws } from 'node:assert/strict';
import { gpuTest } from '../util/gpu.ts';
import { assertClose, assertRelRms } from '../util/assert.ts';
import { maxRel, TEXT, tinyConfig } from './harness.ts';
import { singleRankRun } from './single_rank.ts';
import { plainConfig } from './mesh_rank.ts';
import { localMeshRun } from './mesh_harness.ts';
import type { Named } from './mesh_rank.ts';
import { makePlan, type ParallelPlan, planGroup, planMesh, rankParams } from '../../src/parallel/plan/plan.ts';
import { trafficByKind } from '../../src/parallel/cost/cost.ts';
import { derivedTraffic } from '../../src/parallel/cost/derived_rows.ts';
import { planModelOf, sentByDim, trainerConfig } from '../../src/parallel/run/run.ts';
import { checkArchSplit } from '../../src/parallel/plan/strategy.ts';
import { shardKind, TP_TABLE, tpRole, unshardParam } from '../../src/parallel/tensor/tp_table.ts';
import { createModel } from '../../src/models/registry.ts';
import { parseConfig, type TrainConfig } from '../../src/train/config.ts';
import type { Gpu } from '../../src/gpu/context.ts';

/** Full parameters from the shards of dp index 0 (each from the first stage that holds it). */
function gatherAny(plan: ParallelPlan, shards: Named[], shapes: Map<string, number[]>): Named {
  const mesh = planMesh(plan), out: Named = {};
  for (const [name, shape] of shapes) {
    const holder = [...Array(plan.pp).keys()].find((pp) => name in shards[mesh.rankOf({ dp: 0, pp, cp: 0, tp: 0 })]);
    if (holder === undefined) throw new Error(`no stage holds ${name}`);
    const tp = planGroup(plan, 'tp', mesh.rankOf({ dp: 0, pp: holder, cp: 0, tp: 0 })).map((r) => shards[r][name]);
    out[name] = unshardParam(plan.tp > 1 ? shardKind(name) : 'replicated', tp, shape);
  }
  return out;
}

/** The declared shape of every parameter of `over`'s architecture, in store order. */
function shapesOf(gpu: Gpu, over: Partial<TrainConfig>, vocabSize: number): Map<string, number[]> {
  const model = createModel(gpu, parseConfig(over), vocabSize);
  const out = new Map(model.params.params.map((p) => [p.name, p.shape]));
  model.params.destroy();
  return out;
}

const DEPTH = { arch: 'recurrent-depth', nEmbd: 16, recurIters: 3, recurBackprop: 2 } as const;

const CASES: [string, Partial<TrainConfig>, Partial<ParallelPlan>][] = [
  ['mamba tp2', { arch: 'mamba', nEmbd: 16 }, { tp: 2 }],
  ['mamba tp2 + sp', { arch: 'mamba', nEmbd: 16 }, { tp: 2, sp: true }],
  ['mamba pp2 (1F1B)', { arch: 'mamba', nEmbd: 16 }, { pp: 2, schedule: '1f1b', microBatches: 2 }],
  ['mamba tp2 × pp2', { arch: 'mamba', nEmbd: 16 }, { tp: 2, pp: 2, schedule: '1f1b', microBatches: 2 }],
  ['linear pp2 (GPipe)', { arch: 'linear', nEmbd: 16 }, { pp: 2, schedule: 'gpipe', microBatches: 2 }],
  // Heads across ranks (one of nHead 2 each); ln_x normalises per head, so no statistic crosses ranks.
  ['linear tp2', { arch: 'linear', nEmbd: 16 }, { tp: 2 }],
  ['linear dp2 × tp2', { arch: 'linear', nEmbd: 16 }, { dp: 2, tp: 2 }],
  // Per-channel decay and bonus u split with their heads; the recomputed forward repeats the two g's.
  ['linear tp2 (channel decay), recompute full', {
    arch: 'linear',
    nEmbd: 16,
    linearDecay: 'channel',
    recompute: 'full',
  }, {
    tp: 2,
  }],
  // Sequence parallelism: a shard that starts inside a sequence takes the previous shard's last row
  // for its token shift (sp_shift.ts). B = 3, T = 16 over tp 2: rank 1's 24 rows start at token 8
  // of sequence 1 and cross into sequence 2; dp 2 × tp 2 with B = 1 per replica: 8 rows each.
  ['linear tp2 + sp, B = 3', { arch: 'linear', nEmbd: 16, batchSize: 3 }, { tp: 2, sp: true }],
  ['linear dp2 × tp2 + sp (channel decay), recompute full', {
    arch: 'linear',
    nEmbd: 16,
    batchSize: 2,
    linearDecay: 'channel',
    recompute: 'full',
  }, { dp: 2, tp: 2, sp: true }],
  // Shards aligned with sequences (B = 4: 32 rows each): no halo at all.
  ['linear tp2 + sp, recompute selective', { arch: 'linear', nEmbd: 16, recompute: 'selective' }, { tp: 2, sp: true }],
  ['hybrid tp2', { arch: 'hybrid', nEmbd: 16, attnEvery: 1 }, { tp: 2 }],
  ['hybrid dp2 × tp2', { arch: 'hybrid', nEmbd: 16, attnEvery: 2 }, { dp: 2, tp: 2 }],
  // The shared attention block runs on both stages: every stage holds it, the pp group sums its gradients.
  ['hybrid dp2 × pp2 (1F1B)', { arch: 'hybrid', nEmbd: 16, attnEvery: 1 }, { dp: 2, pp: 2, microBatches: 2 }],
  // ZeRO-2 reduce-scatters the shared block's units in every stage's backward; their pieces are summed over pp.
  ['hybrid dp2 × pp2 (1F1B) × ZeRO-2', { arch: 'hybrid', nEmbd: 16, attnEvery: 1 }, {
    dp: 2,
    pp: 2,
    zero: 2,
    microBatches: 2,
  }],
  // Interleaved: both chunks of a rank read the shared block, whose gradient collects over them and is
  // reduce-scattered by the lower chunk's backward; ZeRO-3 gathers it in the first forward and backward.
  ['hybrid dp2 × pp2 (interleaved, v 2) × ZeRO-3', { arch: 'hybrid', nEmbd: 16, nLayer: 4, attnEvery: 1 }, {
    dp: 2,
    pp: 2,
    zero: 3,
    schedule: 'interleaved',
    virtualStages: 2,
    microBatches: 2,
  }],
  // ZB-H1 (docs/design.md#zero-bubble-zb-h1): B then W per (micro, stage). The recurrent mixers' parameter
  // gradients come from W; the hybrid's shared block is summed over pp after every W; at pp 1 the whole
  // replica's DDP buckets are allReduced inside the last micro-batch's W, never its B.
  ['mamba pp2 (ZB-H1)', { arch: 'mamba', nEmbd: 16 }, { pp: 2, schedule: 'zb-h1', microBatches: 2 }],
  // ZeRO-2 under ZB-H1: W opens each layer's gradient slot and reduce-scatters it once final; B writes no gradient.
  ['hybrid dp2 × pp2 (ZB-H1) × ZeRO-2', { arch: 'hybrid', nEmbd: 16, attnEvery: 1 }, {
    dp: 2,
    pp: 2,
    zero: 2,
    schedule: 'zb-h1',
    microBatches: 2,
  }],
  ['gpt dp2 (ZB-H1 at pp 1, DDP buckets in W)', {}, { dp: 2, schedule: 'zb-h1', microBatches: 2 }],
  ['mamba pp2 (1F1B), recompute full', { arch: 'mamba', nEmbd: 16, recompute: 'full' }, { pp: 2, microBatches: 2 }],
  // The recurrent mixer cores recomputed: they communicate nothing, so the traffic is recompute none's.
  ['mamba pp2 (1F1B), recompute selective', { arch: 'mamba', nEmbd: 16, recompute: 'selective' }, {
    pp: 2,
    microBatches: 2,
  }],
  ['mamba tp2 + sp, recompute selective', { arch: 'mamba', nEmbd: 16, recompute: 'selective' }, { tp: 2, sp: true }],
  ['linear tp2 (channel decay), recompute selective', {
    arch: 'linear',
    nEmbd: 16,
    linearDecay: 'channel',
    recompute: 'selective',
  }, { tp: 2 }],
  ['mamba tp2, recompute full', { arch: 'mamba', nEmbd: 16, recompute: 'full' }, { tp: 2 }],
  ['hybrid tp2, recompute selective', { arch: 'hybrid', nEmbd: 16, attnEvery: 1, recompute: 'selective' }, { tp: 2 }],
  // Recurrent depth: the core's GPT blocks split as GPT's, the adapter whole on every rank; r drawn
  // per step (3 on average, the last 2 iterations recorded), so the tp traffic varies by step.
  ['recurrent-depth tp2', { ...DEPTH, nLayer: 3 }, { tp: 2 }],
  ['recurrent-depth tp2 + sp, recompute full', { ...DEPTH, nLayer: 3, recompute: 'full' }, { tp: 2, sp: true }],
  // Attention is its only mixer: cp splits every iteration's attention (ring and Ulysses).
  ['recurrent-depth cp2 (ring)', { ...DEPTH, nLayer: 3 }, { cp: 2 }],
  ['recurrent-depth dp2 × cp2 (Ulysses), recompute selective', { ...DEPTH, nLayer: 3, recompute: 'selective' }, {
    dp: 2,
    cp: 2,
    cpKind: 'ulysses',
  }],
  // ZeRO: the core's blocks are one unit (piece P), reduced once its last recorded iteration's backward ran.
  ['recurrent-depth dp2 × ZeRO-2', { ...DEPTH, nLayer: 3 }, { dp: 2, zero: 2 }],
  ['recurrent-depth dp2 × tp2 × ZeRO-3', { ...DEPTH, nLayer: 3 }, { dp: 2, tp: 2, zero: 3 }],
  // Interleaved, v 2: pieces prelude | core | coda | coda over stages 0 1 2 3, rank 1 holding the core's stage.
  ['recurrent-depth pp2 (interleaved, v 2) × tp2', { ...DEPTH, nLayer: 4, preludeLayers: 1, codaLayers: 2 }, {
    pp: 2,
    tp: 2,
    schedule: 'interleaved',
    virtualStages: 2,
    microBatches: 2,
  }],
  // Pieces prelude | core: the core, 2 blocks × r, and the head on stage 1.
  ['recurrent-depth dp2 × tp2 × pp2 (1F1B)', { ...DEPTH, nLayer: 3, preludeLayers: 1, codaLayers: 0 }, {
    dp: 2,
    tp: 2,
    pp: 2,
    microBatches: 2,
  }],
];

for (const [what, arch, over] of CASES) {
  gpuTest(`${what} matches the single-rank run of the same architecture`, async (gpu) => {
    const cfg = tinyConfig({ ...arch, dState: 4, expand: 2, dConv: 4 });
    // The reference runs without recomputation: recomputed parallel runs must match it too.
    const plan = makePlan(over), ref = await singleRankRun(gpu, plainConfig({ ...cfg, recompute: 'none' }), TEXT);
    const res = await localMeshRun(gpu, plan, cfg, TEXT);
    const model = planModelOf(plan, parseConfig(cfg), ref.vocabSize);
    const full = parseConfig(cfg);
    for (const [r, x] of res.entries()) {
      ok(maxRel(x.losses, ref.losses) < 1e-4, `${what} rank ${r}: losses ${x.losses} vs ${ref.losses}`);
      // The planner counts this architecture's parameters and collectives from its model (cost/derived_*.ts).
      equal(x.count, rankParams(plan, model, r).dense, `${what} rank ${r}: parameters held`);
      for (const [step, sent] of x.sent.entries()) {
        // Recurrent depth: the step's r sets how many core iterations communicate.
        const rows = await derivedTraffic(trainerConfig(plan, full), plan, ref.vocabSize, r, { step });
        deepStrictEqual(
          rows.filter((row) => !row.exact).map((row) => row.what),
          [],
          `${what} rank ${r}: every row exact`,
        );
        const measured = sentByDim(sent);
        deepStrictEqual(
          measured,
          Object.fromEntries(trafficByKind(rows)),
          `${what} rank ${r} step ${step}: derived traffic = measured`,
        );
      }
    }
    const shapes = shapesOf(gpu, cfg, ref.vocabSize), names = [...shapes.keys()];
    equal(names.length, Object.keys(ref.grads0).length);
    const g = gatherAny(plan, res.map((x) => x.grads0), shapes), p = gatherAny(plan, res.map((x) => x.params), shapes);
    for (const n of names) assertRelRms(g[n], ref.grads0[n], `${what}: step-0 gradient of ${n}`);
    for (const n of names) assertClose(p[n], ref.params[n], `${what}: ${n} after ${parseConfig(cfg).steps} steps`);
  });
}

Deno.test('tp_table: every parameter of every architecture has a role; cp on a recurrent mixer is refused by name', async () => {
  const { testGpu } = await import('../util/gpu.ts');
  const gpu = await testGpu();
  const archs = [['gpt'], ['mamba'], ['hybrid'], ['linear', 'head'], ['linear', 'channel'], ['gpt-moe'], [
    'mamba-moe',
  ]] as const;
  for (const [arch, linearDecay] of archs) {
    const cfg = tinyConfig({ arch, nEmbd: 16, dState: 4, linearDecay: linearDecay ?? 'head' });
    for (const name of shapesOf(gpu, cfg, 11).keys()) tpRole(name); // throws when missing
  }
  ok(TP_TABLE.length > 10);
  equal(tpRole('backbone.layers.3.mixer.out_proj.weight'), 'row');
  equal(tpRole('backbone.layers.0.mixer.x_proj_B.weight'), 'row-inner');
  equal(tpRole('backbone.layers.0.mixer.A_raw'), 'channel');
  equal(tpRole('blocks.0.att.ln_x.weight'), 'channel');
  equal(tpRole('blocks.1.att.time_decay.weight'), 'column');
  equal(tpRole('blocks.1.ffn.receptance.weight'), 'replicated');
  equal(tpRole('emb.weight'), 'vocab');
  checkArchSplit(makePlan({ dp: 2, tp: 2 }), 'linear');
  checkArchSplit(makePlan({ tp: 2, sp: true }), 'linear');
  checkArchSplit(makePlan({ pp: 2 }), 'mamba-moe');
  equal(tpRole('transformer.h.1.mlp.experts.3.c_proj.weight'), 'replicated', 'experts whole on every tp rank');
  checkArchSplit(makePlan({ tp: 2, sp: true }), 'mamba-moe');
  throws(
    () => checkArchSplit(makePlan({ cp: 2 }), 'mamba'),
    /cp 2 does not apply to --arch mamba: .*sequence-parallel scan/,
  );
  checkArchSplit(makePlan({ tp: 2 }), 'gpt-moe');
  checkArchSplit(makePlan({ tp: 2, pp: 2 }), 'mamba');
  checkArchSplit(makePlan({ dp: 2, pp: 2 }), 'hybrid');
});
