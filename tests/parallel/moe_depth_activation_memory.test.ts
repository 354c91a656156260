/**
 * activation_memory.ts for the architectures the hand-kept count refused: the MoE models (their routed experts run on
 * fixed-capacity slot buffers, GShard's, so the tape does not depend on the routing and the meta GPU's zeros route
 * them exactly) and recurrent depth (a core iterated r times, the last k on the tape; counted at the r whose tape is
 * the largest, r = k + 1). On the GPU the pool's growth over a real forward equals the count exactly, as
 * activation_memory.test.ts checks for GPT: on one rank, and for gpt-moe on two expert-parallel ranks in one process
 * (twice one rank's figure).
 */
import { equal, ok } from 'node:assert/strict';
import { activationMemory } from '../../src/perf/activation_memory.ts';
import { peakIterations } from '../../src/perf/tape_count.ts';
import { makePlan } from '../../src/parallel/plan/plan.ts';
import { gpuTest } from '../util/gpu.ts';
import { Tape } from '../../src/autograd/tape.ts';
import { createModel } from '../../src/models/registry.ts';
import { variableDepth } from '../../src/models/recurrence.ts';
import { closeLocalWorld, localWorld } from '../../src/comm/local.ts';
import { ModelStages } from '../../src/parallel/pipeline/stages.ts';
import { RankContext } from '../../src/parallel/mesh/rank_context.ts';
import { parseConfig, type TrainConfig } from '../../src/train/config.ts';
import { grown } from './tape_growth.ts';

const B = 2, T = 8, V = 11;
const config = (over: Record<string, unknown>): TrainConfig =>
  parseConfig({ blockSize: T, nLayer: 2, nHead: 2, nEmbd: 16, batchSize: B, seed: 1, ...over });
const tokens = (n: number, seed: number) => Int32Array.from({ length: n }, (_, i) => (i * 7 + seed) % V);

const CASES: [string, Record<string, unknown>][] = [
  ['gpt-moe', { arch: 'gpt-moe', nExpert: 4, moeTopK: 2 }],
  ['mamba-moe', { arch: 'mamba-moe', nExpert: 4, dState: 4 }],
  ['recurrent-depth', { arch: 'recurrent-depth', nLayer: 3, recurIters: 2, recurBackprop: 2 }],
  ['recurrent-depth, full recomputation', {
    arch: 'recurrent-depth',
    nLayer: 3,
    recurIters: 2,
    recurBackprop: 2,
    recompute: 'full',
  }],
];

gpuTest('MoE and recurrent-depth forwards on one rank: tape bytes = the count exactly', async (gpu) => {
  for (const [name, over] of CASES) {
    const cfg = config(over), model = createModel(gpu, cfg, V), x = tokens(B * T, 0);
    const depth = variableDepth(model);
    if (depth) depth.iterations = peakIterations(cfg); // what the count runs: k iterations kept, one detached
    const tok = gpu.upload(x, [B, T], 'i32'), tgt = gpu.upload(tokens(B * T, 3), [B * T], 'i32');
    try {
      const delta = await grown(gpu, async () => {
        const tape = new Tape(gpu, model.params.gradMap());
        await model.forward(tape, tok, x, tgt, B, T, { recompute: cfg.recompute });
        return [tape];
      });
      const mem = await activationMemory(cfg, makePlan(), V, 0);
      equal(delta, mem.stages[0].kept.pooled, `${name}: pool growth vs count`);
      // A detached iteration and a recomputed segment each add a working set beside the kept tape.
      if (depth) ok(mem.work > 0 && mem.bytes === mem.perMicroBatch + mem.work, `${name}: work ${mem.work}`);
    } finally {
      [tok, tgt].forEach((t) => t.release());
      model.params.destroy();
    }
  }
});

gpuTest("gpt-moe over ep 2: both ranks' tapes on one device = 2 × the count", async (gpu) => {
  const cfg = config(CASES[0][1]), world = localWorld(2), x = tokens(B * T, 0), y = tokens(B * T, 5);
  const toFree: (() => void)[] = [];
  try {
    const models = world.map((c) => {
      const self = c.newGroup([c.ranks[c.rank]], 'self');
      const m = new ModelStages(
        gpu,
        cfg,
        V,
        new RankContext({ tp: self, vocabSize: V }),
        { ppRank: 0, pp: 1, v: 1 },
        c,
      );
      toFree.push(() => m.params.destroy());
      return m;
    });
    const delta = await grown(gpu, () =>
      Promise.all(models.map(async (m) => {
        // As the mesh trainer's pipeline executor runs a stage: its load-balancing terms beside the head's loss.
        const tape = new Tape(gpu, m.gradMap), out = await m.blocks(tape, await m.embed(tape, x, B, T), 0, B, T);
        ok(m.auxLoss(tape, 1), 'the load-balancing loss is on the tape');
        await m.head(tape, out, y, 1);
        return tape;
      })));
    const mem = await activationMemory({ ...cfg, batchSize: 2 * B }, makePlan({ dp: 2, ep: 2 }), V, 0);
    equal(delta, 2 * mem.pooledBytes, 'pool growth vs count');
  } finally {
    toFree.forEach((f) => f());
    closeLocalWorld(world);
  }
});
