/**
 * The activation memory of mixed precision (docs/design.md#mixed-precision): under autocast a GPT tape also
 * keeps the half precision copy of every linear's input and weight and of FlashAttention's
 * q, k, v — 2 bytes per element in f16, 4 in bf16 (rounded values in f32 storage). The formula
 * (activation_memory.ts with `autocast`) equals the pool growth of a real forward exactly, as
 * the f32 one does, for both attention kernels; `npm run plan` refuses the splits it does not count.
 */
import { equal, ok, throws } from 'node:assert/strict';
import { activationMemory } from '../../src/perf/activation_memory.ts';
import { makePlan, type PlanModel } from '../../src/parallel/plan/plan.ts';
import { gpuTest, hasShaderF16 } from '../util/gpu.ts';
import { GPT } from '../../src/models/gpt.ts';
import { Tape } from '../../src/autograd/tape.ts';
import type { Autocast } from '../../src/autograd/autocast.ts';
import { grown } from './tape_growth.ts';
import { castToF16 } from '../../src/kernels/cast.ts';

const B = 3, T = 7, V = 11, C = 24;
const MODEL: PlanModel = { nLayer: 2, nHead: 2, nEmbd: C, blockSize: T, batchSize: B, vocabSize: V };

for (const mode of ['f16', 'bf16'] as const satisfies readonly Autocast[]) {
  for (const attention of ['flash', 'naive'] as const) {
    gpuTest(
      `GPT forward under ${mode} autocast (${attention}): tape bytes = formula with the half copies`,
      async (gpu) => {
        if (mode === 'f16' && !hasShaderF16(gpu)) {
          // No f16 tensors on this adapter (SwiftShader): what it can check is that they are refused.
          throws(() => castToF16(gpu, gpu.zeros([1]), gpu.empty([1], 'f16')), /needs? the adapter's 'shader-f16'/);
          return;
        }
        const model = new GPT(
          gpu,
          { vocabSize: V, blockSize: T, nLayer: 2, nHead: 2, nEmbd: C, bias: true, attention },
          1,
        );
        const x = Int32Array.from({ length: B * T }, (_, i) => (i * 7) % V);
        const tok = gpu.upload(x, [B, T], 'i32'), tgt = gpu.upload(x.map((v) => (v + 3) % V), [B * T], 'i32');
        const delta = await grown(gpu, async () => {
          const tape = new Tape(gpu, model.params.gradMap());
          tape.autocast = mode;
          await model.forward(tape, tok, x, tgt, B, T);
          return [tape];
        });
        const o = { bias: true, attention };
        const mem = activationMemory(makePlan(), MODEL, 0, { ...o, autocast: mode });
        equal(delta, mem.pooledBytes, `${mode} ${attention}: pool growth vs formula`);
        const f32 = activationMemory(makePlan(), MODEL, 0, o);
        const copies = mem.stages[0].items.filter((i) => i.what.startsWith('autocast:'));
        ok(copies.length >= 9 && mem.bytes > f32.bytes, 'the copies are counted on top of the f32 tensors');
        const width = mode === 'f16' ? 2 : 4;
        ok(copies.every((i) => (i.width ?? 4) === width), `${mode} copies are ${width} bytes an element`);
        [tok, tgt].forEach((t) => t.release());
        model.params.destroy();
      },
    );
  }
}

Deno.test('activation memory under autocast: the splits and architectures not counted are refused by name', () => {
  throws(
    () => activationMemory(makePlan({ tp: 2 }), MODEL, 0, { autocast: 'bf16' }),
    /bf16-mixed: .* got --arch gpt, tp 2/,
  );
  throws(() => activationMemory(makePlan(), MODEL, 0, { autocast: 'f16', recompute: 'full' }), /recompute full/);
  const f16 = activationMemory(makePlan({ dp: 2 }), MODEL, 0, { autocast: 'f16' }).bytes;
  const bf16 = activationMemory(makePlan({ dp: 2 }), MODEL, 0, { autocast: 'bf16' }).bytes;
  const f32 = activationMemory(makePlan({ dp: 2 }), MODEL, 0, {}).bytes;
  equal(bf16 - f32, 2 * (f16 - f32), 'bf16 copies take twice the bytes of f16 ones');
});
