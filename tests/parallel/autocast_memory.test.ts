/**
 * The activation memory of mixed precision (docs/design.md#mixed-precision): under autocast a GPT tape also
 * keeps the half precision copy of every linear's input and weight and of FlashAttention's
 * q, k, v — 2 bytes per element in f16, 4 in bf16 (rounded values in f32 storage). The count
 * (activation_memory.ts, the model's forward over a meta GPU with the config's precision) equals the pool growth
 * of a real forward exactly, as the f32 one does, for both attention kernels, over tp and under recomputation.
 */
import { equal, ok, throws } from 'node:assert/strict';
import { activationMemory } from '../../src/perf/activation_memory.ts';
import { makePlan } from '../../src/parallel/plan/plan.ts';
import { gpuTest, hasShaderF16 } from '../util/gpu.ts';
import { GPT } from '../../src/models/gpt.ts';
import { Tape } from '../../src/autograd/tape.ts';
import type { Autocast } from '../../src/autograd/autocast.ts';
import type { Gpu } from '../../src/gpu/context.ts';
import type { Recompute } from '../../src/models/recompute.ts';
import { grown } from './tape_growth.ts';
import { castToF16 } from '../../src/kernels/cast.ts';
import { parseConfig, type TrainConfig } from '../../src/train/config.ts';
import { closeLocalWorld, localWorld } from '../../src/comm/local.ts';
import { ModelStages } from '../../src/parallel/pipeline/stages.ts';
import { RankContext } from '../../src/parallel/mesh/rank_context.ts';

const B = 3, T = 7, V = 11, C = 24;
const config = (over: Record<string, unknown>): TrainConfig =>
  parseConfig({ nLayer: 2, nHead: 2, nEmbd: C, blockSize: T, batchSize: B, bias: true, seed: 1, ...over });

/** The pool growth of one single-rank GPT forward (B rows) under autocast `mode`. */
async function growth(gpu: Gpu, mode: Autocast, attention: 'flash' | 'naive', recompute: Recompute = 'none') {
  const model = new GPT(gpu, { vocabSize: V, blockSize: T, nLayer: 2, nHead: 2, nEmbd: C, bias: true, attention }, 1);
  const x = Int32Array.from({ length: B * T }, (_, i) => (i * 7) % V);
  const tok = gpu.upload(x, [B, T], 'i32'), tgt = gpu.upload(x.map((v) => (v + 3) % V), [B * T], 'i32');
  try {
    return await grown(gpu, async () => {
      const tape = new Tape(gpu, model.params.gradMap());
      tape.autocast = mode;
      await model.forward(tape, tok, x, tgt, B, T, { recompute });
      return [tape];
    });
  } finally {
    [tok, tgt].forEach((t) => t.release());
    model.params.destroy();
  }
}

for (const mode of ['f16', 'bf16'] as const satisfies readonly Autocast[]) {
  for (const attention of ['flash', 'naive'] as const) {
    gpuTest(
      `GPT forward under ${mode} autocast (${attention}): tape bytes = the count with the half copies`,
      async (gpu) => {
        if (mode === 'f16' && !hasShaderF16(gpu)) {
          // No f16 tensors on this adapter (SwiftShader): what it can check is that they are refused.
          throws(() => castToF16(gpu, gpu.zeros([1]), gpu.empty([1], 'f16')), /needs? the adapter's 'shader-f16'/);
          return;
        }
        const precision = mode === 'f16' ? 'f16-mixed' : 'bf16-mixed';
        const mem = await activationMemory(config({ attention, precision }), makePlan(), V, 0);
        equal(await growth(gpu, mode, attention), mem.pooledBytes, `${mode} ${attention}: pool growth vs count`);
        const f32 = await activationMemory(config({ attention }), makePlan(), V, 0);
        ok(mem.bytes > f32.bytes, 'the copies are counted on top of the f32 tensors');
      },
    );
  }
}

Deno.test('activation count under autocast: bf16 copies take twice the bytes of f16 ones', async () => {
  const at = async (precision: string) =>
    (await activationMemory(config({ precision, batchSize: 4 }), makePlan({ dp: 2 }), V, 0)).bytes;
  const [f16, bf16, f32] = [await at('f16-mixed'), await at('bf16-mixed'), await at('f32')];
  ok(f16 > f32, 'the copies are counted on top of the f32 tensors');
  equal(bf16 - f32, 2 * (f16 - f32));
});

// Once refused by the hand-kept count (gpt without tp, cp or recomputation only): now counted from the model, and
// held to the real tapes. bf16 needs no device feature, so this runs on every adapter.
gpuTest('bf16 autocast over tp 2 and under full recomputation: the tapes = the count exactly', async (gpu) => {
  const BT = 2, TT = 8, cfg = config({ precision: 'bf16-mixed', blockSize: TT, batchSize: BT }), world = localWorld(2);
  const x = Int32Array.from({ length: BT * TT }, (_, i) => (i * 7) % V), toFree: (() => void)[] = [];
  try {
    const models = world.map((c) => {
      const m = new ModelStages(gpu, cfg, V, new RankContext({ tp: c, vocabSize: V }), { ppRank: 0, pp: 1, v: 1 });
      toFree.push(() => m.params.destroy());
      return m;
    });
    const delta = await grown(gpu, () =>
      Promise.all(models.map(async (m) => {
        const tape = new Tape(gpu, m.gradMap);
        tape.autocast = 'bf16';
        await m.forward(tape, x, x, BT, TT);
        return tape;
      })));
    equal(delta, 2 * (await activationMemory(cfg, makePlan({ tp: 2 }), V, 0)).pooledBytes, 'tp 2');
  } finally {
    toFree.forEach((f) => f());
    closeLocalWorld(world);
  }
  const full = config({ precision: 'bf16-mixed', recompute: 'full' });
  const mem = await activationMemory(full, makePlan(), V, 0);
  equal(await growth(gpu, 'bf16', 'flash', 'full'), mem.stages[0].kept.pooled, 'recompute full');
  ok(mem.work > 0);
});
