/**
 * activation_memory.ts: the formula's scaling (tp, sp, cp, pipeline schedules, B, T) and, on
 * the GPU, the bytes a real forward leaves on its tape against the formula.
 *
 * Tolerance of the GPU checks: none. The formula lists every allocation a forward makes, so
 * with each rounded up to the pool's 256-byte granule (`pooledBytes`) it must equal the pool's
 * live-byte growth exactly; the shapes are ragged (B·T = 21, C = 24, V = 11) so the rounding is
 * exercised, and the unrounded `bytes` must lie within one granule per allocation of it.
 * Two-rank models (tp 2 ± sp, cp 2 ring / Ulysses) run both ranks on one device in one process
 * (src/comm/local.ts), so the growth is twice one rank's figure (their shapes are equal).
 */
import { grown, stageGrowth } from './tape_growth.ts';
import { equal, ok, throws } from 'node:assert/strict';
import {
  activationBytes,
  activationMemory,
  type ActivationOptions,
  korthikantiLayerBytes,
} from '../../src/perf/activation_memory.ts';
import { itemBytes } from '../../src/perf/activation_items.ts';
import { makePlan, type ParallelPlan, type PlanModel } from '../../src/parallel/plan/plan.ts';
import { POOL_GRANULE } from '../../src/gpu/pool.ts';
import { gpuTest } from '../util/gpu.ts';
import { GPT, type GPTConfig } from '../../src/models/gpt.ts';
import { Tape } from '../../src/autograd/tape.ts';
import { closeLocalWorld, localWorld } from '../../src/comm/local.ts';
import type { PipelineStageModel } from '../../src/parallel/pipeline/pipeline_stage.ts';
import { ModelStages } from '../../src/parallel/pipeline/stages.ts';
import { RankContext } from '../../src/parallel/mesh/rank_context.ts';
import { cpPositions } from '../../src/parallel/context/context_parallel.ts';
import { parseConfig, type TrainConfig } from '../../src/train/config.ts';
import type { CpKind } from '../../src/parallel/plan/plan.ts';

const MODEL: PlanModel = { nLayer: 4, nHead: 4, nEmbd: 64, blockSize: 64, batchSize: 16, vocabSize: 65 };
const act = (over: Partial<ParallelPlan>, model: Partial<PlanModel> = {}, rank = 0, o: ActivationOptions = {}) =>
  activationMemory(makePlan(over), { ...MODEL, ...model }, rank, o);

Deno.test('activation formula: one GPT layer is 18·sbh + (4 + a)·sb elements, linear in B and T (flash)', () => {
  const one = act({}), b = MODEL.batchSize, s = MODEL.blockSize, h = MODEL.nEmbd, a = MODEL.nHead;
  equal(one.perLayer, 4 * (18 * s * b * h + (4 + a) * s * b));
  equal(one.inFlight, 1);
  equal(one.bytes, one.perMicroBatch);
  // Doubling B doubles everything but the vocabulary's index offsets (V+1 values) and the loss (2).
  const twoB = act({}, { batchSize: 2 * b }), fixed = 4 * (MODEL.vocabSize + 1 + 2);
  equal(twoB.bytes - fixed, 2 * (one.bytes - fixed));
  // T: flash attention is linear in T; the naive kernel adds a·s²·b probabilities per layer.
  equal(act({}, { blockSize: 2 * s }).perLayer, 2 * one.perLayer);
  equal(act({}, {}, 0, { attention: 'naive' }).perLayer - one.perLayer, 4 * (a * s * s * b - a * s * b));
  // Korthikanti et al.'s fp16 count for comparison: 34 sbh + 5as²b bytes.
  equal(korthikantiLayerBytes(s, b, h, a), s * b * h * 34 + 5 * a * s * s * b);
  ok(korthikantiLayerBytes(s, b, h, a, 2, true) * 2 === korthikantiLayerBytes(s, b, h, a));
});

Deno.test('activation formula: dp splits the batch, tp halves the attention/MLP part, sp the LayerNorm region, cp the sequence', () => {
  const one = act({}), dp = act({ dp: 2 });
  equal(dp.perLayer * 2, one.perLayer);
  equal(act({ dp: 2, zero: 3 }).bytes, act({ dp: 2, zero: 1 }).bytes, 'ZeRO shards states, not activations');
  // The mesh trainer's tapes also hold each micro-batch's token ids and targets (stages.ts uploads
  // them), which the single-rank Trainer of the same rows reads from tensors outside the tape.
  equal(
    dp.bytes - act({}, { batchSize: MODEL.batchSize / 2 }).bytes,
    4 * 2 * (MODEL.batchSize / 2) * MODEL.blockSize,
  );
  const N = MODEL.batchSize * MODEL.blockSize, C = MODEL.nEmbd, a = MODEL.nHead;
  // tp (biases off): 10 replicated N·C per layer + 12·N·C/t + LayerNorm stats 4N + LSE N·a/t.
  const tpLayer = (t: number) => act({ tp: t }, {}, 0, { bias: false }).perLayer;
  equal(tpLayer(2), 4 * (10 * N * C + (12 * N * C) / 2 + 4 * N + (N * a) / 2));
  equal(tpLayer(4), 4 * (10 * N * C + (12 * N * C) / 4 + 4 * N + (N * a) / 4));
  equal(tpLayer(2) - tpLayer(4), 4 * (12 * N * C + N * a) / 4, 'the sharded part halves from tp 2 to tp 4');
  // sp divides the 6 LayerNorm-region N·C (+ stats) by t; gathers and partial sums (4 N·C) stay whole.
  const sp = act({ tp: 2, sp: true }, {}, 0, { bias: false }).perLayer;
  equal(tpLayer(2) - sp, 4 * ((6 * N * C) / 2 + 4 * N / 2));
  // cp divides the sequence: every per-layer tensor of the ring variant halves.
  equal(act({ cp: 2 }).perLayer * 2, one.perLayer);
  const uly = act({ cp: 2, cpKind: 'ulysses' });
  equal(uly.perLayer - act({ cp: 2 }).perLayer, 4 * 4 * (N / 2) * C, 'Ulysses keeps both all-to-all outputs');
});

Deno.test('activation formula: 1F1B keeps ≤ p micro-batches in flight, GPipe all m; the schedule walk matches peakInFlight', () => {
  const m = 8, p = 4;
  for (const rank of [0, 1, 2, 3]) {
    const at = (schedule: 'gpipe' | '1f1b') => act({ pp: p, microBatches: m, schedule }, {}, rank, { trainer: 'mesh' });
    const g = at('gpipe'), f = at('1f1b');
    equal(g.inFlight, m);
    ok(f.inFlight <= p && f.inFlight === p - rank, `rank ${rank}: 1F1B in flight ${f.inFlight}`);
    equal(g.bytes, m * g.perMicroBatch, `rank ${rank}: GPipe holds every micro-batch`);
    // 1F1B: in-flight tapes plus at most one activation received ahead of its forward.
    const ahead = rank > 0 ? 4 * (MODEL.batchSize / m) * MODEL.blockSize * MODEL.nEmbd : 0;
    ok(
      f.bytes >= f.inFlight * f.perMicroBatch && f.bytes <= f.inFlight * f.perMicroBatch + ahead,
      `rank ${rank}: ${f.bytes}`,
    );
    ok(f.bytes < g.bytes);
  }
  const inter = act({ pp: 2, microBatches: 4, schedule: 'interleaved', virtualStages: 2 }, {}, 0, { trainer: 'mesh' });
  equal(inter.stages.map((s) => s.stage).join(), '0,2');
});

Deno.test('activation formula: refuses the MoE architectures and expert parallelism by name', () => {
  // mamba, linear and hybrid are counted (recurrent_activation_memory.test.ts); the MoE models are not.
  throws(() => activationBytes(makePlan(), MODEL, 0, { arch: 'gpt-moe' }), /not the MoE models.*got --arch gpt-moe/);
  throws(
    () => activationBytes(makePlan({ dp: 2, ep: 2 }), { ...MODEL, nExpert: 4 }, 0, { trainer: 'mesh' }),
    /gpt-moe/,
  );
});

// ---- GPU: the tape's real allocations against the formula ---------------------------------

const B = 3, T = 7, V = 11;
const gcfg = (over: Partial<GPTConfig> = {}): GPTConfig => ({
  vocabSize: V,
  blockSize: T,
  nLayer: 2,
  nHead: 2,
  nEmbd: 24,
  bias: true,
  ...over,
});
/** The same model as a training config, for the parallel model objects. */
const tcfg = (g: GPTConfig): TrainConfig =>
  parseConfig({
    arch: 'gpt',
    blockSize: g.blockSize,
    nLayer: g.nLayer,
    nHead: g.nHead,
    nEmbd: g.nEmbd,
    bias: g.bias,
    attention: g.attention ?? 'flash',
    seed: 1,
  });
const tokens = (n: number, seed: number) => Int32Array.from({ length: n }, (_, i) => (i * 7 + seed) % V);

/** Exact pooled equality, and the unrounded figure within one granule per allocation. */
function agrees(delta: number, mem: ReturnType<typeof activationMemory>, ranks: number, what: string): void {
  const allocs = mem.stages.flatMap((s) => s.items).reduce((a, x) => a + x.count, 0);
  equal(delta, ranks * mem.pooledBytes, `${what}: pool growth vs formula`);
  ok(
    delta >= ranks * mem.bytes && delta - ranks * mem.bytes <= ranks * allocs * POOL_GRANULE,
    `${what}: raw ${mem.bytes}`,
  );
}

for (const [attention, bias] of [['flash', true], ['naive', false]] as const) {
  gpuTest(
    `GPT forward on one rank: tape bytes = formula exactly (${attention} attention, bias ${bias})`,
    async (gpu) => {
      const cfg = gcfg({ attention, bias }), model = new GPT(gpu, cfg, 1);
      const x = tokens(B * T, 0),
        tok = gpu.upload(x, [B, T], 'i32'),
        tgt = gpu.upload(tokens(B * T, 3), [B * T], 'i32');
      const delta = await grown(gpu, async () => {
        const tape = new Tape(gpu, model.params.gradMap());
        await model.forward(tape, tok, x, tgt, B, T);
        return [tape];
      });
      const plan: PlanModel = { nLayer: 2, nHead: 2, nEmbd: 24, blockSize: T, batchSize: B, vocabSize: V };
      agrees(delta, activationMemory(makePlan(), plan, 0, { bias, attention }), 1, 'gpt');
      [tok, tgt].forEach((t) => t.release());
      model.params.destroy();
    },
  );
}

const twoRanks: [string, Partial<ParallelPlan>][] = [['tp 2', { tp: 2 }], ['tp 2 + sp', { tp: 2, sp: true }], [
  'cp 2 ring',
  { cp: 2 },
], ['cp 2 Ulysses', { cp: 2, cpKind: 'ulysses' }]];
for (const [name, over] of twoRanks) {
  gpuTest(`${name}: both ranks' tapes on one device = 2 × the formula`, async (gpu) => {
    const BT = 2, TT = 8, cfg = gcfg({ blockSize: TT, nHead: 2 }), world = localWorld(2);
    const x = tokens(BT * TT, 0), y = tokens(BT * TT, 5);
    const kind: CpKind = over.cpKind ?? 'ring';
    const toFree: (() => void)[] = [];
    try {
      const delta = await grown(gpu, () =>
        Promise.all(world.map(async (c) => {
          // Each rank runs the model's own pieces over its RankContext: tp shards, or T/cp tokens.
          const self = c.newGroup([c.ranks[c.rank]], 'self'), pos = over.cp ? cpPositions(kind, c.rank, 2, TT) : null;
          const ctx = over.tp
            ? new RankContext({ tp: c, vocabSize: V, sequenceParallel: over.sp })
            : new RankContext({ tp: self, vocabSize: V, context: { group: c, kind, positions: pos! } });
          const m = new ModelStages(gpu, tcfg(cfg), V, ctx, { ppRank: 0, pp: 1, v: 1 });
          toFree.push(() => m.params.destroy());
          const pick = (a: Int32Array) =>
            pos
              ? Int32Array.from({ length: BT * pos.length }, (_, i) =>
                a[Math.floor(i / pos.length) * TT + pos[i % pos.length]])
              : a;
          const tape = new Tape(gpu, m.gradMap);
          await m.forward(tape, pick(x), pick(y), BT, pos ? pos.length : TT);
          return tape;
        })));
      const plan: PlanModel = { nLayer: 2, nHead: 2, nEmbd: 24, blockSize: TT, batchSize: BT, vocabSize: V };
      agrees(delta, activationMemory(makePlan(over), plan, 0), 2, name);
    } finally {
      toFree.forEach((f) => f());
      closeLocalWorld(world);
    }
  });
}

gpuTest(
  "pipeline stages (pp 2, with and without biases): one micro-batch of each stage = the formula's stage items exactly",
  async (gpu) => {
    const BT = 2, TT = 8, world = localWorld(1), x = tokens(BT * TT, 0), y = tokens(BT * TT, 5);
    const plan = makePlan({ pp: 2, microBatches: 2 }),
      pm: PlanModel = { nLayer: 2, nHead: 2, nEmbd: 24, blockSize: TT, batchSize: 2 * BT, vocabSize: V };
    try {
      for (const bias of [true, false]) {
        const cfg = gcfg({ blockSize: TT, bias });
        for (const rank of [0, 1]) {
          const m: PipelineStageModel = new ModelStages(
            gpu,
            tcfg(cfg),
            V,
            new RankContext({ tp: world[0], vocabSize: V }),
            { ppRank: rank, pp: 2, v: 1 },
          );
          const delta = await stageGrowth(gpu, m, rank as 0 | 1, x, y, BT, TT);
          const mem = activationMemory(plan, pm, rank, { trainer: 'mesh', bias });
          equal(mem.stages.length, 1);
          equal(delta, itemBytes(mem.stages[0].items, true), `bias ${bias} stage ${rank}`);
          equal(mem.perMicroBatch, itemBytes(mem.stages[0].items));
          m.params.destroy();
        }
      }
    } finally {
      closeLocalWorld(world);
    }
  },
);

for (const [mode, attention] of [['full', 'flash'], ['selective', 'naive']] as const) {
  gpuTest(
    `recompute ${mode} (${attention}): the forward keeps exactly the formula's items; the predicted peak drops`,
    async (gpu) => {
      const cfg = gcfg({ attention }), model = new GPT(gpu, cfg, 1);
      const x = tokens(B * T, 0),
        tok = gpu.upload(x, [B, T], 'i32'),
        tgt = gpu.upload(tokens(B * T, 3), [B * T], 'i32');
      const delta = await grown(gpu, async () => {
        const tape = new Tape(gpu, model.params.gradMap());
        await model.forward(tape, tok, x, tgt, B, T, { recompute: mode });
        return [tape];
      });
      const plan: PlanModel = { nLayer: 2, nHead: 2, nEmbd: 24, blockSize: T, batchSize: B, vocabSize: V };
      const o = { attention, recompute: mode } as const, mem = activationMemory(makePlan(), plan, 0, o);
      equal(delta, itemBytes(mem.stages[0].items, true), `${mode}: pool growth after the forward vs the kept items`);
      ok(mem.bytes > itemBytes(mem.stages[0].items), 'the peak adds one recomputed segment');
      // The predicted peak drops once what a layer stops keeping outweighs one recomputed segment:
      // 4 layers of T = 64 (the tiny forward above keeps too little to save).
      const big: PlanModel = { ...plan, nLayer: 4, blockSize: 64, batchSize: 4 };
      const at = (p: Partial<ParallelPlan>, r: 'none' | 'full' | 'selective') =>
        activationMemory(makePlan(p), big, 0, { attention, recompute: r });
      // Selective only saves where the T×T kernel runs: a tensor-parallel rank always runs FlashAttention.
      const plans: Partial<ParallelPlan>[] = [
        {},
        { dp: 2, pp: 2, microBatches: 2 },
        ...(mode === 'full' ? [{ tp: 2, sp: true }] : []),
      ];
      for (const p of plans) {
        const [r, n] = [at(p, mode), at(p, 'none')];
        ok(
          r.bytes < n.bytes && r.perLayer < n.perLayer,
          `${mode} ${JSON.stringify(p)}: ${r.bytes} B vs ${n.bytes} B without`,
        );
      }
      [tok, tgt].forEach((t) => t.release());
      model.params.destroy();
    },
  );
}
