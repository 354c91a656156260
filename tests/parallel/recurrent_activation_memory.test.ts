/**
 * activation_memory.ts for mamba, linear (head and channel decay) and hybrid: on the GPU the
 * bytes a real forward leaves on its tape equal the count from the model over a meta GPU exactly,
 * as activation_memory.test.ts checks for GPT (pooled: every allocation rounded up to the pool's
 * granule; shapes ragged, T = 37 spans two scan / linear-attention chunks), on one rank under
 * each recomputation mode and on two tensor-parallel ranks in one process (twice one rank's
 * figure); and recomputation lowers the predicted peak as it lowers the measured tape.
 */
import { grown, stageGrowth } from './tape_growth.ts';
import { equal, ok } from 'node:assert/strict';
import { type ActivationMemory, activationMemory } from '../../src/perf/activation_memory.ts';
import { makePlan, type ParallelPlan } from '../../src/parallel/plan/plan.ts';
import { gpuTest } from '../util/gpu.ts';
import { Tape } from '../../src/autograd/tape.ts';
import { ARCHS } from '../../src/models/registry.ts';
import { closeLocalWorld, localWorld } from '../../src/comm/local.ts';
import { ModelStages } from '../../src/parallel/pipeline/stages.ts';
import type { PipelineStageModel } from '../../src/parallel/pipeline/pipeline_stage.ts';
import { RankContext } from '../../src/parallel/mesh/rank_context.ts';
import { parseConfig, type TrainConfig } from '../../src/train/config.ts';
import type { Recompute } from '../../src/models/recompute.ts';

const V = 11;
const ARCH_CASES: [string, Record<string, unknown>][] = [
  ['mamba', { arch: 'mamba', dState: 5 }],
  ['linear (head decay)', { arch: 'linear', linearDecay: 'head' }],
  ['linear (channel decay)', { arch: 'linear', linearDecay: 'channel' }],
  ['hybrid', { arch: 'hybrid', dState: 5, nLayer: 3, attnEvery: 2 }],
];
const config = (over: Record<string, unknown>, shape: Record<string, unknown> = {}): TrainConfig =>
  parseConfig({ blockSize: 37, nLayer: 2, nHead: 2, nEmbd: 24, seed: 1, ...over, ...shape });
const tokens = (n: number, seed: number) => Int32Array.from({ length: n }, (_, i) => (i * 7 + seed) % V);
/** The count of `cfg` with micro-batches of b rows (the plan's global batch b·dp·m) under `recompute`. */
const mem = (cfg: TrainConfig, b: number, over: Partial<ParallelPlan> = {}, recompute = cfg.recompute) => {
  const plan = makePlan(over);
  return activationMemory({ ...cfg, batchSize: b * plan.dp * plan.microBatches, recompute }, plan, V, 0);
};
/** One micro-batch of every stage, pooled (received activations included). */
const pooled = (m: ActivationMemory) => m.stages.reduce((a, s) => a + s.input.pooled + s.kept.pooled, 0);

Deno.test('recurrent activation count: tp shrinks the inner channels, a pipeline stage counts its own layers', async () => {
  const cfg = config({ arch: 'mamba' });
  const one = await mem(cfg, 4), tp2 = await mem(cfg, 4, { tp: 2 });
  ok(tp2.perLayer < one.perLayer, `tp 2 ${tp2.perLayer} vs ${one.perLayer}`);
  const h = config({ arch: 'hybrid', nLayer: 4, attnEvery: 2 });
  const pp = await mem(h, 4, { pp: 2, microBatches: 2 }), whole = await mem(h, 4);
  equal(pp.stages.length, 1);
  ok(pp.perMicroBatch < whole.perMicroBatch);
});

for (const [name, over] of ARCH_CASES) {
  gpuTest(`${name} forward on one rank: tape bytes = the count exactly under every recomputation`, async (gpu) => {
    const B = 3, cfg = config(over), T = cfg.blockSize, model = ARCHS[cfg.arch](gpu, cfg, V, 1);
    const x = tokens(B * T, 0), tok = gpu.upload(x, [B, T], 'i32'), tgt = gpu.upload(tokens(B * T, 3), [B * T], 'i32');
    const measured: Partial<Record<Recompute, number>> = {};
    try {
      for (const recompute of ['none', 'selective', 'full'] as const) {
        const delta = await grown(gpu, async () => {
          const tape = new Tape(gpu, model.params.gradMap());
          await model.forward(tape, tok, x, tgt, B, T, { recompute });
          return [tape];
        });
        const m = await mem(cfg, B, {}, recompute), kept = m.stages[0].kept;
        equal(delta, kept.pooled, `${name} ${recompute}: pool growth vs count`);
        ok(kept.raw <= kept.pooled && kept.raw > 0, `${name} ${recompute}: raw ${kept.raw}`);
        if (recompute === 'none') equal(m.bytes, kept.raw, 'nothing to recompute');
        else ok(m.work > 0 && m.bytes === kept.raw + m.work, 'the peak adds one recomputed segment');
        measured[recompute] = delta;
      }
      // The tape shrinks under both modes; the predicted peak too once what the layers stop keeping
      // outweighs one recomputed segment (8 layers of T = 128).
      ok(measured.selective! < measured.none! && measured.full! < measured.selective!, JSON.stringify(measured));
      const big = config(over, { nLayer: 8, blockSize: 128, attnEvery: 2, dState: 16 });
      for (const r of ['selective', 'full'] as const) {
        for (const p of [{}, { dp: 2, pp: 2, microBatches: 2 }, { tp: 2 }]) {
          const [a, n] = [await mem(big, 4, p, r), await mem(big, 4, p, 'none')];
          ok(
            a.bytes < n.bytes && a.perLayer < n.perLayer,
            `${name} ${r} ${JSON.stringify(p)}: ${a.bytes} vs ${n.bytes}`,
          );
        }
      }
    } finally {
      [tok, tgt].forEach((t) => t.release());
      model.params.destroy();
    }
  });
}

const TP_CASES: [string, Record<string, unknown>, Partial<ParallelPlan>][] = [
  ...ARCH_CASES.map(([n, o]) =>
    [`${n} tp 2`, o, { tp: 2 }] as [string, Record<string, unknown>, Partial<ParallelPlan>]
  ),
  ['mamba tp 2 + sp', ARCH_CASES[0][1], { tp: 2, sp: true }],
  ['hybrid tp 2 + sp', ARCH_CASES[3][1], { tp: 2, sp: true }],
];
for (const [name, over, plan] of TP_CASES) {
  gpuTest(`${name}: both ranks' tapes on one device = 2 × the count`, async (gpu) => {
    const BT = 2, cfg = config(over), TT = cfg.blockSize, world = localWorld(2);
    const x = tokens(BT * TT, 0), y = tokens(BT * TT, 5), toFree: (() => void)[] = [];
    try {
      // The models first: their frozen tables (zero positions, ln_x's unit gain) come from the pool too.
      const models = world.map((c) => {
        const ctx = new RankContext({ tp: c, vocabSize: V, sequenceParallel: plan.sp });
        const m = new ModelStages(gpu, cfg, V, ctx, { ppRank: 0, pp: 1, v: 1 });
        toFree.push(() => m.params.destroy());
        return m;
      });
      const delta = await grown(gpu, () =>
        Promise.all(models.map(async (m) => {
          const tape = new Tape(gpu, m.gradMap);
          await m.forward(tape, x, y, BT, TT);
          return tape;
        })));
      const m = await mem(cfg, BT, plan);
      equal(delta, 2 * m.pooledBytes, `${name}: pool growth vs count`);
      ok(delta >= 2 * m.bytes, `${name}: raw ${m.bytes}`);
    } finally {
      toFree.forEach((f) => f());
      closeLocalWorld(world);
    }
  });
}

gpuTest(
  'pipeline stages (pp 2) of every recurrent model: one micro-batch of each stage = its counted stage',
  async (gpu) => {
    const BT = 2, world = localWorld(1), plan = makePlan({ pp: 2, microBatches: 2 });
    try {
      for (const [name, over] of ARCH_CASES) {
        const cfg = config(over, { nLayer: 4, attnEvery: 2 }), TT = cfg.blockSize;
        const x = tokens(BT * TT, 0), y = tokens(BT * TT, 5);
        for (const rank of [0, 1]) {
          const m: PipelineStageModel = new ModelStages(
            gpu,
            cfg,
            V,
            new RankContext({ tp: world[0], vocabSize: V }),
            { ppRank: rank, pp: 2, v: 1 },
          );
          const delta = await stageGrowth(gpu, m, rank as 0 | 1, x, y, BT, TT);
          const at = await activationMemory({ ...cfg, batchSize: 2 * BT }, plan, V, rank);
          equal(at.stages.length, 1);
          equal(delta, pooled(at), `${name} stage ${rank}`);
          m.params.destroy();
        }
      }
    } finally {
      closeLocalWorld(world);
    }
  },
);
