/**
 * ZeRO-3's working memory (src/parallel/zero/zero_units.ts) in the forward: the resident units are
 * gathered first, then each block's unit when the forward reaches that block — never a block
 * ahead — and the loss equals the forward over the unsharded values.
 */
import { deepStrictEqual, ok, rejects } from 'node:assert/strict';
import { gpuTest } from '../util/gpu.ts';
import { parseConfig } from '../../src/train/config.ts';
import { createModel } from '../../src/models/registry.ts';
import { Tape } from '../../src/autograd/tape.ts';
import { layerOf, planBuckets } from '../../src/parallel/data/buckets.ts';
import { LayerUnits } from '../../src/parallel/zero/zero_units.ts';
import { tinyConfig } from './harness.ts';

gpuTest('ZeRO-3 forward: one layer gathered at a time, in block order; same loss as the whole model', async (gpu) => {
  for (const arch of ['gpt', 'mamba'] as const) {
    const cfg = parseConfig(tinyConfig({ arch, nLayer: 3, nEmbd: 16 })), V = 11, b = 2, t = cfg.blockSize;
    const model = createModel(gpu, cfg, V);
    const x = Int32Array.from({ length: b * t }, (_, i) => (i * 7) % V);
    const y = Int32Array.from({ length: b * t }, (_, i) => (i * 3 + 1) % V);
    const [tokens, targets] = [gpu.upload(x, [b, t], 'i32'), gpu.upload(y, [b, t], 'i32')];
    const loss = async (opts = {}) => {
      const tape = new Tape(gpu, new Map(), false);
      const out = (await gpu.read((await model.forward(tape, tokens, x, targets, b, t, opts)).loss!))[0];
      tape.dispose();
      return out;
    };
    const whole = await loss();
    const values = await gpu.read(model.params.values) as Float32Array;
    const buckets = planBuckets(model.params, 'layer');
    const units = new LayerUnits(gpu, model.params, buckets, true);
    const log: string[] = [];
    const name = (k: number) => layerOf(buckets[k].params[0].name) ?? buckets[k].params[0].name;
    const gather = (k: number) => {
      log.push(`gather ${name(k)}`);
      return Promise.resolve(values.slice(buckets[k].start, buckets[k].end));
    };
    const all = new Set(buckets.map((b) => b.index));
    const sharded = await units.forward(gather, all, (beforeBlock) =>
      loss({
        beforeBlock: async (i: number) => {
          log.push(`block ${i}`);
          await beforeBlock(i);
        },
      }));
    ok(Math.abs(sharded - whole) <= 1e-6 * Math.abs(whole), `${arch}: loss ${sharded} vs ${whole}`);
    const resident = buckets.filter((b) => !layerOf(b.params[0].name)).map((b) => `gather ${b.params[0].name}`);
    const stack = [...Array(3).keys()].flatMap((
      i,
    ) => [`block ${i}`, `gather ${name(buckets.findIndex((b) => layerOf(b.params[0].name)?.endsWith(`.${i}`)))}`]);
    deepStrictEqual(log, [...resident, ...stack], `${arch}: resident units, then each layer as its block starts`);
    // Outside a pass the sharded weights are not there: reading one fails loudly.
    await rejects(loss(), /read outside a training pass/);
    model.params.destroy();
  }
});
