/**
 * Parameters per rank derived from the model (src/parallel/cost/derived_params.ts): every rank of
 * several plans is built as the mesh trainer builds it (mesh/rank_model.ts rankModel) over a meta
 * GPU and a world that refuses messages, with no GPU, and its store's count must equal what
 * derivedRankParams returns from its one tp-shard build filtered by the stage placement. The GPT
 * count is also checked against nanoGPT's closed form (12·L·C² + 13·L·C + (V + T)·C + 2·C).
 */
import { deepEqual, equal } from 'node:assert/strict';
import { parseConfig, type TrainConfig } from '../../src/train/config.ts';
import { makePlan, type ParallelPlan, planWorldSize, rankParams } from '../../src/parallel/plan/plan.ts';
import { rankModel } from '../../src/parallel/mesh/rank_model.ts';
import { countParams, derivedRankParams, silentWorld } from '../../src/parallel/cost/derived_params.ts';
import { MetaGpu } from '../../src/gpu/meta.ts';
import { tpVocabConfig } from '../../src/models/vocab_pad.ts';

const V = 65;
const BASE = { nLayer: 4, nHead: 4, nEmbd: 32, blockSize: 16, padVocab: 8, nExpert: 4, moeEvery: 2, attnEvery: 2 };
const PLANS: Partial<ParallelPlan>[] = [
  { tp: 2 },
  { pp: 2 },
  { dp: 2, zero: 3 },
  { tp: 2, pp: 2, sp: true },
  { pp: 2, schedule: 'interleaved', virtualStages: 2, microBatches: 2 },
  { cp: 2 },
];
const MOE_PLANS: Partial<ParallelPlan>[] = [{ dp: 2, ep: 2 }, { dp: 2, ep: 2, tp: 2, pp: 2 }];

function check(arch: string, over: Partial<ParallelPlan>, extra: Record<string, unknown> = {}) {
  const plan = makePlan(over), cfg: TrainConfig = parseConfig({ ...BASE, arch, ...extra });
  const v = plan.schedule === 'interleaved' ? plan.virtualStages : 1;
  const derived = derivedRankParams(tpVocabConfig(cfg, plan.tp), V);
  for (let r = 0; r < planWorldSize(plan); r++) {
    const built = rankModel(new MetaGpu(), cfg, plan, silentWorld(r, planWorldSize(plan)), V, v);
    const what = `${arch} ${JSON.stringify(over)} rank ${r}`;
    deepEqual(derived(plan, r), countParams(built.stages.params.params, cfg.arch, plan.tp), what);
  }
}

for (const arch of ['gpt', 'linear', 'mamba', 'hybrid']) {
  Deno.test(`derived params: ${arch}: every rank's built model = the derived count (no GPU)`, () => {
    for (const p of PLANS) check(arch, p);
  });
}

Deno.test('derived params: gpt-moe and mamba-moe under ep: the rank built with its expert shard = the derived count', () => {
  for (const arch of ['gpt-moe', 'mamba-moe']) for (const p of [...PLANS, ...MOE_PLANS]) check(arch, p);
});

Deno.test('derived params: recurrent-depth (prelude, core, coda pieces) under tp and dp', () => {
  const rd = { nLayer: 3, preludeLayers: 1, codaLayers: 1, recurIters: 2, recurBackprop: 2 };
  for (const p of [{ tp: 2 }, { dp: 2, zero: 3 }] as Partial<ParallelPlan>[]) check('recurrent-depth', p, rd);
});

Deno.test('derived params: a GPT of any shape = nanoGPT closed form, whole and per tp / pp rank', () => {
  const L = 6,
    C = 48,
    T = 32,
    Vp = 72,
    model = { nLayer: L, nHead: 4, nEmbd: C, blockSize: T, batchSize: 8, vocabSize: Vp };
  equal(rankParams(makePlan(), model, 0).dense, 12 * L * C * C + 13 * L * C + (Vp + T) * C + 2 * C);
  // tp 2: the four matrices, the column biases and the vocabulary split; LayerNorms, wpe and row biases whole.
  const tp2 = 6 * L * C * C + L * (4 * C + 3 * C / 2 + C + 4 * C / 2 + C) + (Vp / 2 + T) * C + 2 * C;
  equal(rankParams(makePlan({ tp: 2 }), model, 0).dense, tp2);
  // pp 2: the last stage holds half the blocks, ln_f and its own copy of the tied embedding.
  equal(rankParams(makePlan({ pp: 2 }), model, 1).dense, (L / 2) * (12 * C * C + 13 * C) + Vp * C + 2 * C);
});
