/**
 * activation_memory.ts on GPT: the figures counted from the model over a meta GPU keep the shape of the paper's count
 * (one layer 18·sbh + (4 + a)·sb elements; scaling in B, T, dp, tp, sp, cp and the pipeline schedules) and, on the
 * GPU, equal the bytes a real forward leaves on its tape.
 *
 * Tolerance of the GPU checks: none. The meta count allocates what the real forward allocates, each rounded up to the
 * pool's 256-byte granule (`pooledBytes`), so it must equal the pool's live-byte growth exactly; the shapes are ragged
 * (B·T = 21, C = 24, V = 11) so the rounding is exercised. Two-rank models (tp 2 ± sp, cp 2 ring / Ulysses) run both
 * ranks on one device in one process (src/comm/local.ts), so the growth is twice one rank's figure (their shapes are
 * equal).
 */
import { grown, stageGrowth } from './tape_growth.ts';
import { equal, ok } from 'node:assert/strict';
import { type ActivationMemory, activationMemory, korthikantiLayerBytes } from '../../src/perf/activation_memory.ts';
import { makePlan, type ParallelPlan } from '../../src/parallel/plan/plan.ts';
import { gpuTest } from '../util/gpu.ts';
import { GPT } from '../../src/models/gpt.ts';
import { Tape } from '../../src/autograd/tape.ts';
import { closeLocalWorld, localWorld } from '../../src/comm/local.ts';
import type { PipelineStageModel } from '../../src/parallel/pipeline/pipeline_stage.ts';
import { ModelStages } from '../../src/parallel/pipeline/stages.ts';
import { RankContext } from '../../src/parallel/mesh/rank_context.ts';
import { cpPositions } from '../../src/parallel/context/context_parallel.ts';
import { parseConfig, type TrainConfig } from '../../src/train/config.ts';
import type { CpKind } from '../../src/parallel/plan/plan.ts';

const MODEL = { nLayer: 4, nHead: 4, nEmbd: 64, blockSize: 64, batchSize: 16 }, MV = 65;
const act = (over: Partial<ParallelPlan>, model: Record<string, unknown> = {}, rank = 0) =>
  activationMemory(parseConfig({ ...MODEL, ...model }), makePlan(over), MV, rank);

Deno.test('activation count: one GPT layer is 18·sbh + (4 + a)·sb elements, linear in B and T (flash)', async () => {
  const one = await act({}), b = MODEL.batchSize, s = MODEL.blockSize, h = MODEL.nEmbd, a = MODEL.nHead;
  equal(one.perLayer, 4 * (18 * s * b * h + (4 + a) * s * b));
  equal(one.inFlight, 1);
  equal(one.bytes, one.perMicroBatch);
  // Doubling B doubles everything but the vocabulary's index offsets (V+1 values) and the loss (2).
  const twoB = await act({}, { batchSize: 2 * b }), fixed = 4 * (MV + 1 + 2);
  equal(twoB.bytes - fixed, 2 * (one.bytes - fixed));
  // T: flash attention is linear in T; the naive kernel adds a·s²·b probabilities per layer.
  equal((await act({}, { blockSize: 2 * s })).perLayer, 2 * one.perLayer);
  equal((await act({}, { attention: 'naive' })).perLayer - one.perLayer, 4 * (a * s * s * b - a * s * b));
  // Korthikanti et al.'s fp16 count for comparison: 34 sbh + 5as²b bytes.
  equal(korthikantiLayerBytes(s, b, h, a), s * b * h * 34 + 5 * a * s * s * b);
  ok(korthikantiLayerBytes(s, b, h, a, 2, true) * 2 === korthikantiLayerBytes(s, b, h, a));
});

Deno.test('activation count: dp splits the batch, tp halves the attention/MLP part, sp the LayerNorm region, cp the sequence', async () => {
  const one = await act({}), dp = await act({ dp: 2 });
  equal(dp.perLayer * 2, one.perLayer);
  equal(
    (await act({ dp: 2, zero: 3 })).bytes,
    (await act({ dp: 2, zero: 1 })).bytes,
    'ZeRO shards states, not activations',
  );
  // The mesh trainer's tapes also hold each micro-batch's token ids and targets (stages.ts uploads
  // them), which the single-rank Trainer of the same rows reads from tensors outside the tape.
  equal(
    dp.bytes - (await act({}, { batchSize: MODEL.batchSize / 2 })).bytes,
    4 * 2 * (MODEL.batchSize / 2) * MODEL.blockSize,
  );
  const N = MODEL.batchSize * MODEL.blockSize, C = MODEL.nEmbd, a = MODEL.nHead;
  // tp (biases off): 10 replicated N·C per layer + 12·N·C/t + LayerNorm stats 4N + LSE N·a/t.
  const tpLayer = async (t: number) => (await act({ tp: t }, { bias: false })).perLayer;
  const [tp2, tp4] = [await tpLayer(2), await tpLayer(4)];
  equal(tp2, 4 * (10 * N * C + (12 * N * C) / 2 + 4 * N + (N * a) / 2));
  equal(tp4, 4 * (10 * N * C + (12 * N * C) / 4 + 4 * N + (N * a) / 4));
  equal(tp2 - tp4, 4 * (12 * N * C + N * a) / 4, 'the sharded part halves from tp 2 to tp 4');
  // sp divides the 6 LayerNorm-region N·C (+ stats) by t; gathers and partial sums (4 N·C) stay whole.
  const sp = (await act({ tp: 2, sp: true }, { bias: false })).perLayer;
  equal(tp2 - sp, 4 * ((6 * N * C) / 2 + 4 * N / 2));
  // cp divides the sequence: every per-layer tensor of the ring variant halves.
  const ring = await act({ cp: 2 });
  equal(ring.perLayer * 2, one.perLayer);
  const uly = await act({ cp: 2, cpKind: 'ulysses' });
  equal(uly.perLayer - ring.perLayer, 4 * 4 * (N / 2) * C, 'Ulysses keeps both all-to-all outputs');
});

Deno.test('activation count: 1F1B keeps ≤ p micro-batches in flight, GPipe all m; the schedule walk matches peakInFlight', async () => {
  const m = 8, p = 4;
  for (const rank of [0, 1, 2, 3]) {
    const at = (schedule: 'gpipe' | '1f1b') => act({ pp: p, microBatches: m, schedule }, {}, rank);
    const g = await at('gpipe'), f = await at('1f1b');
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
  const inter = await act({ pp: 2, microBatches: 4, schedule: 'interleaved', virtualStages: 2 });
  equal(inter.stages.map((s) => s.stage).join(), '0,2');
});

// ---- GPU: the tape's real allocations against the count ---------------------------------

const B = 3, T = 7, V = 11;
/** The tiny model as a training config: 2 layers, 2 heads, width 24. */
const tcfg = (over: Record<string, unknown> = {}): TrainConfig =>
  parseConfig({ blockSize: T, nLayer: 2, nHead: 2, nEmbd: 24, bias: true, seed: 1, ...over });
const tokens = (n: number, seed: number) => Int32Array.from({ length: n }, (_, i) => (i * 7 + seed) % V);
/** One micro-batch of `stages` pooled, as the pool grows by it (received activation included). */
const pooled = (m: ActivationMemory) => m.stages.reduce((a, s) => a + s.input.pooled + s.kept.pooled, 0);

/** Exact pooled equality; the unrounded figure below it. */
function agrees(delta: number, mem: ActivationMemory, ranks: number, what: string): void {
  equal(delta, ranks * mem.pooledBytes, `${what}: pool growth vs count`);
  ok(mem.bytes <= mem.pooledBytes && mem.bytes > 0, `${what}: raw ${mem.bytes}`);
}

/** The pool growth of one single-rank GPT forward of B rows of `cfg` (its recomputation too). */
async function gptGrowth(gpu: Parameters<typeof grown>[0], cfg: TrainConfig): Promise<number> {
  const { blockSize, nLayer, nHead, nEmbd, bias, attention } = cfg, x = tokens(B * T, 0);
  const model = new GPT(gpu, { vocabSize: V, blockSize, nLayer, nHead, nEmbd, bias, attention }, 1);
  const tok = gpu.upload(x, [B, T], 'i32'), tgt = gpu.upload(tokens(B * T, 3), [B * T], 'i32');
  try {
    return await grown(gpu, async () => {
      const tape = new Tape(gpu, model.params.gradMap());
      await model.forward(tape, tok, x, tgt, B, T, { recompute: cfg.recompute });
      return [tape];
    });
  } finally {
    [tok, tgt].forEach((t) => t.release());
    model.params.destroy();
  }
}

for (const [attention, bias] of [['flash', true], ['naive', false]] as const) {
  gpuTest(
    `GPT forward on one rank: tape bytes = the count exactly (${attention} attention, bias ${bias})`,
    async (gpu) => {
      const cfg = tcfg({ attention, bias, batchSize: B });
      agrees(await gptGrowth(gpu, cfg), await activationMemory(cfg, makePlan(), V, 0), 1, 'gpt');
    },
  );
}

const twoRanks: [string, Partial<ParallelPlan>][] = [['tp 2', { tp: 2 }], ['tp 2 + sp', { tp: 2, sp: true }], [
  'cp 2 ring',
  { cp: 2 },
], ['cp 2 Ulysses', { cp: 2, cpKind: 'ulysses' }]];
for (const [name, over] of twoRanks) {
  gpuTest(`${name}: both ranks' tapes on one device = 2 × the count`, async (gpu) => {
    const BT = 2, TT = 8, cfg = tcfg({ blockSize: TT, batchSize: BT }), world = localWorld(2);
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
          const m = new ModelStages(gpu, cfg, V, ctx, { ppRank: 0, pp: 1, v: 1 });
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
      agrees(delta, await activationMemory(cfg, makePlan(over), V, 0), 2, name);
    } finally {
      toFree.forEach((f) => f());
      closeLocalWorld(world);
    }
  });
}

gpuTest(
  'pipeline stages (pp 2, with and without biases): one micro-batch of each stage = its counted stage exactly',
  async (gpu) => {
    const BT = 2, TT = 8, world = localWorld(1), x = tokens(BT * TT, 0), y = tokens(BT * TT, 5);
    const plan = makePlan({ pp: 2, microBatches: 2 });
    try {
      for (const bias of [true, false]) {
        const cfg = tcfg({ blockSize: TT, bias, batchSize: 2 * BT });
        for (const rank of [0, 1]) {
          const m: PipelineStageModel = new ModelStages(gpu, cfg, V, new RankContext({ tp: world[0], vocabSize: V }), {
            ppRank: rank,
            pp: 2,
            v: 1,
          });
          const delta = await stageGrowth(gpu, m, rank as 0 | 1, x, y, BT, TT);
          const mem = await activationMemory(cfg, plan, V, rank);
          equal(mem.stages.length, 1);
          equal(delta, pooled(mem), `bias ${bias} stage ${rank}`);
          equal(mem.perMicroBatch, mem.stages[0].input.raw + mem.stages[0].kept.raw);
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
    `recompute ${mode} (${attention}): the forward keeps exactly the counted bytes; the predicted peak drops`,
    async (gpu) => {
      const cfg = tcfg({ attention, recompute: mode, batchSize: B }),
        mem = await activationMemory(cfg, makePlan(), V, 0);
      equal(await gptGrowth(gpu, cfg), pooled(mem), `${mode}: pool growth after the forward vs the kept bytes`);
      ok(mem.work > 0 && mem.bytes === mem.perMicroBatch + mem.work, 'the peak adds one recomputed segment');
      // The predicted peak drops once what a layer stops keeping outweighs one recomputed segment:
      // 4 layers of T = 64 (the tiny forward above keeps too little to save).
      const big = { nLayer: 4, blockSize: 64, batchSize: 4, attention };
      const at = (p: Partial<ParallelPlan>, r: 'none' | 'full' | 'selective') =>
        activationMemory(tcfg({ ...big, recompute: r }), makePlan(p), V, 0);
      // Selective only saves where the T×T kernel runs: a tensor-parallel rank always runs FlashAttention.
      const plans: Partial<ParallelPlan>[] = [
        {},
        { dp: 2, pp: 2, microBatches: 2 },
        ...(mode === 'full' ? [{ tp: 2, sp: true }] : []),
      ];
      for (const p of plans) {
        const [r, n] = [await at(p, mode), await at(p, 'none')];
        ok(
          r.bytes < n.bytes && r.perLayer < n.perLayer,
          `${mode} ${JSON.stringify(p)}: ${r.bytes} B vs ${n.bytes} B without`,
        );
      }
    },
  );
}
