/**
 * Incremental decoding with the KV cache (src/models/decode.ts, docs/design.md §32) gives the
 * full forward's logits, per architecture that has attention: prefill a prompt, decode N tokens
 * one by one, and compare each step's logits with the full forward's at that position, within
 * the f32 bounds of design §7 (elementwise and relative RMS). Weights are moved off their small
 * initial values so attention is far from uniform and every layer matters. Also: cache
 * overflow and unsupported architectures fail with clear errors.
 */
import { equal } from 'node:assert/strict';
import { gpuTest } from '../util/gpu.ts';
import { assertClose, assertRelRms, assertThrows, rng } from '../util/assert.ts';
import { Tape } from '../../src/autograd/tape.ts';
import { createModel } from '../../src/models/registry.ts';
import { type LanguageModel, logitsOf } from '../../src/models/model.ts';
import { KvDecoder } from '../../src/models/decode.ts';
import { parseConfig, type TrainConfig } from '../../src/train/config.ts';
import type { Gpu } from '../../src/gpu/context.ts';

const V = 37;

function build(gpu: Gpu, extra: Partial<TrainConfig>, blockSize = 24): LanguageModel {
  const cfg = parseConfig({ nLayer: 2, nHead: 2, nEmbd: 32, blockSize, ...extra });
  return createModel(gpu, cfg, V, 7);
}

/** Adds U(−0.15, 0.15) to every weight: attention scores then spread well past f32 noise. */
async function perturb(gpu: Gpu, model: LanguageModel): Promise<void> {
  const r = rng(11), base = Float32Array.from(await gpu.read(model.params.values));
  for (let i = 0; i < base.length; i++) base[i] += 0.3 * (r() - 0.5);
  gpu.write(model.params.values, base);
}

/** Full-forward logits (B·T, V') of `ids` (B, T). */
async function fullLogits(
  gpu: Gpu,
  model: LanguageModel,
  ids: Int32Array,
  b: number,
  t: number,
): Promise<Float32Array> {
  const tape = new Tape(gpu, new Map(), false);
  const tok = gpu.upload(ids, [b, t], 'i32');
  try {
    return await gpu.read(logitsOf(await model.forward(tape, tok, ids, null, b, t), 'test')) as Float32Array;
  } finally {
    tape.dispose();
    tok.release();
  }
}

// [label, config, B]: gpt with FlashAttention and with the T×T kernel (the prefill uses the
// model's own kernel), B = 2 rows in lockstep, a padded vocabulary, and gpt-moe with top-2
// routing whose capacity (factor 2: ⌈2·2·T/4⌉ = T slots) drops no token, so routing one token
// alone equals routing the whole sequence.
const CASES: [string, Partial<TrainConfig>, number][] = [
  ['gpt', { arch: 'gpt' }, 1],
  ['gpt naive attention', { arch: 'gpt', attention: 'naive' }, 1],
  ['gpt B=2', { arch: 'gpt' }, 2],
  ['gpt padded vocab', { arch: 'gpt', padVocab: 16, bias: false }, 1],
  ['gpt-moe top-2', { arch: 'gpt-moe', nExpert: 4, moeTopK: 2, capacityFactor: 2, moeEvery: 1 }, 1],
];

for (const [label, extra, b] of CASES) {
  gpuTest(`KV-cache decoding equals the full forward's logits: ${label}`, async (gpu) => {
    const model = build(gpu, extra);
    await perturb(gpu, model);
    const prompt = 5, steps = 12, t = prompt + steps, Vp = model.cfg.vocabSize;
    const r = rng(3), ids = Int32Array.from({ length: b * t }, () => Math.floor(r() * V));
    const full = await fullLogits(gpu, model, ids, b, t);
    const rowsAt = (pos: number) => {
      const out = new Float32Array(b * Vp);
      for (let row = 0; row < b; row++) {
        out.set(full.subarray((row * t + pos) * Vp, (row * t + pos + 1) * Vp), row * Vp);
      }
      return out;
    };
    const dec = new KvDecoder(model, { batch: b });
    const promptIds = new Int32Array(b * prompt);
    for (let row = 0; row < b; row++) promptIds.set(ids.subarray(row * t, row * t + prompt), row * prompt);
    const check = (got: Float32Array, pos: number) => {
      assertClose(got, rowsAt(pos), `logits at position ${pos}`);
      assertRelRms(got, rowsAt(pos), `logits at position ${pos}`);
    };
    check(await dec.prefill(promptIds), prompt - 1);
    for (let pos = prompt; pos < t; pos++) {
      const next = Int32Array.from({ length: b }, (_, row) => ids[row * t + pos]);
      check(await dec.step(next), pos);
    }
    equal(dec.position, t);
    equal(dec.cache.layerCount, 2, 'one cache per attention layer');
    dec.release();
    model.params.destroy();
  });
}

gpuTest('KV-cache decoding: overflow past the cache and a second prefill are refused', async (gpu) => {
  const model = build(gpu, { arch: 'gpt' }, 8);
  const dec = new KvDecoder(model);
  await dec.prefill(Int32Array.from([1, 2, 3, 4, 5, 6]));
  await dec.step(Int32Array.of(7));
  await dec.step(Int32Array.of(8)); // fills position 7, the last of 8
  let msg = '';
  await dec.step(Int32Array.of(9)).catch((e: Error) => (msg = e.message));
  equal(msg.includes('KV cache overflow: 1 more token(s) after 8 cached positions exceed its 8 positions'), true, msg);
  msg = '';
  await dec.prefill(Int32Array.of(1)).catch((e: Error) => (msg = e.message));
  equal(msg.includes('reset() before a new prompt'), true, msg);
  dec.reset();
  msg = '';
  await dec.prefill(new Int32Array(9)).catch((e: Error) => (msg = e.message));
  equal(msg.includes('KV cache overflow: 9 more token(s) after 0 cached positions'), true, msg);
  assertThrows(() => new KvDecoder(model, { tMax: 9 }), 'tMax must be an integer in 1 … 8');
  dec.release();
  model.params.destroy();
});

gpuTest('KV-cache decoding refuses the recurrent architectures, naming what is supported', (gpu) => {
  for (const arch of ['mamba', 'linear', 'hybrid'] as const) {
    const model = build(gpu, { arch, attnEvery: 1 });
    assertThrows(() => new KvDecoder(model), `arch '${arch}' is not supported`);
    assertThrows(() => new KvDecoder(model), 'supported: gpt, gpt-moe');
    model.params.destroy();
  }
});
