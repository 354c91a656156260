/**
 * Incremental decoding with the cache (src/models/decode.ts, docs/design.md#decoding) gives the
 * full forward's logits, per architecture (attention caching K and V, Mamba carrying its conv
 * window and scan state, the linear attention its token-shift rows and wkv state): prefill a
 * prompt, decode N tokens one by one, and compare each step's logits with the full forward's at
 * that position, within the f32 bounds of docs/design.md#test-tolerances (elementwise and relative RMS). Weights are
 * moved off their small initial values so attention is far from uniform and every layer matters.
 * Also: cache overflow, a changed recurrent depth, a recurrent mixer that carries no state and an
 * unknown architecture fail with clear errors.
 */
import { equal } from 'node:assert/strict';
import { gpuTest } from '../util/gpu.ts';
import { assertClose, assertRelRms, assertThrows, rng } from '../util/assert.ts';
import { Tape } from '../../src/autograd/tape.ts';
import { createModel } from '../../src/models/registry.ts';
import { type LanguageModel, logitsOf } from '../../src/models/model.ts';
import { KvDecoder } from '../../src/models/decode.ts';
import { cachedContext, KvCache } from '../../src/models/kv_cache.ts';
import type { Tensor } from '../../src/gpu/tensor.ts';
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
// Mamba-backbone models: a prompt of 5 is shorter than nothing (K − 1 = 3 for the window), the
// B = 2 case runs K = 2 and N = 5; the hybrid's shared attention runs after both Mamba layers.
// Recurrent depth: prelude 1, core 2 blocks × 3 iterations, coda 1 (8 attention layers), with
// and without injection, and one core block iterated 4 times with no prelude or coda.
// Linear attention: a decay per head (trained by the chunked kernel, decoded by the recurrent
// one) and per channel with the bonus u, B = 1 and 2; two shifted rows and a wkv state per layer.
// [label, config, B, attention layers cached, recurrent states carried]
const CASES: [string, Partial<TrainConfig>, number, number, number][] = [
  ['gpt', { arch: 'gpt' }, 1, 2, 0],
  ['gpt naive attention', { arch: 'gpt', attention: 'naive' }, 1, 2, 0],
  ['gpt B=2', { arch: 'gpt' }, 2, 2, 0],
  ['gpt padded vocab', { arch: 'gpt', padVocab: 16, bias: false }, 1, 2, 0],
  ['gpt-moe top-2', { arch: 'gpt-moe', nExpert: 4, moeTopK: 2, capacityFactor: 2, moeEvery: 1 }, 1, 2, 0],
  ['mamba', { arch: 'mamba' }, 1, 0, 4],
  ['mamba B=2, K=2, N=5', { arch: 'mamba', dConv: 2, dState: 5 }, 2, 0, 4],
  ['hybrid', { arch: 'hybrid', attnEvery: 1 }, 1, 2, 4],
  ['hybrid B=2 naive attention', { arch: 'hybrid', attnEvery: 1, attention: 'naive' }, 2, 2, 4],
  ['mamba-moe top-2', { arch: 'mamba-moe', nExpert: 4, moeTopK: 2, capacityFactor: 2, moeEvery: 1 }, 1, 0, 4],
  [
    'recurrent-depth r=3',
    { arch: 'recurrent-depth', nLayer: 4, preludeLayers: 1, codaLayers: 1, evalIterations: 3 },
    1,
    8,
    0,
  ],
  [
    'recurrent-depth r=3 no injection, B=2',
    { arch: 'recurrent-depth', nLayer: 4, preludeLayers: 1, codaLayers: 1, evalIterations: 3, recurInject: false },
    2,
    8,
    0,
  ],
  [
    'recurrent-depth core only, r=4',
    { arch: 'recurrent-depth', nLayer: 1, preludeLayers: 0, codaLayers: 0, evalIterations: 4 },
    1,
    4,
    0,
  ],
  ['linear head decay', { arch: 'linear', linearDecay: 'head' }, 1, 0, 6],
  ['linear channel decay', { arch: 'linear', linearDecay: 'channel' }, 1, 0, 6],
  ['linear head decay B=2', { arch: 'linear', linearDecay: 'head' }, 2, 0, 6],
  ['linear channel decay B=2, 3 layers', { arch: 'linear', linearDecay: 'channel', nLayer: 3 }, 2, 0, 9],
];

for (const [label, extra, b, layers, states] of CASES) {
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
    equal(dec.cache.layerCount, layers, 'one cache per attention layer (per core iteration)');
    equal(
      dec.cache.stateCount,
      states,
      'per Mamba layer a window and a scan state; per linear layer two rows and a wkv state',
    );
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

gpuTest('cached decoding runs a recurrent mixer only over the state its layer carries', async (gpu) => {
  const cache = new KvCache(gpu, { b: 1, c: 8, nh: 2, tMax: 4 }), ctx = cachedContext(cache);
  const tape = new Tape(gpu, new Map(), false), x = gpu.zeros([1, 1, 8]), label = 'blocks.0.att.mixer';
  let ran = 0;
  const core = (_tp: Tape, [a]: readonly Tensor[]) => (ran++, a);
  const refused = 'blocks.0.att.mixer: cached decoding cannot run this recurrent mixer (it does not carry its state';
  assertThrows(() => ctx.mixer(tape, [x], core, label), refused);
  // A state under another label (the layer's token shift) does not let the mixer run from zero.
  ctx.carry!('blocks.0.att.shift', [1, 8]);
  assertThrows(() => ctx.mixer(tape, [x], core, label), refused);
  equal(ran, 0);
  const s = ctx.carry!(label, [1, 2, 4, 4]);
  equal(await ctx.mixer(tape, [x], core, label), x);
  equal(ran, 1);
  equal(s?.size, 32);
  equal(cache.stateCount, 2);
  tape.dispose();
  x.release();
  cache.release();
  const fake = { arch: 'rnn', cfg: { blockSize: 8, nEmbd: 8 } } as unknown as LanguageModel;
  assertThrows(() => new KvDecoder(fake), "arch 'rnn' is not supported");
  assertThrows(() => new KvDecoder(fake), 'supported: gpt, gpt-moe, mamba, hybrid, mamba-moe, recurrent-depth, linear');
});

gpuTest('KV-cache decoding: recurrent depth refuses a step at another r than the prefill', async (gpu) => {
  const model = build(gpu, { arch: 'recurrent-depth', nLayer: 3, preludeLayers: 1, codaLayers: 1, evalIterations: 2 });
  const dec = new KvDecoder(model), depth = model as unknown as { iterations: number };
  await dec.prefill(Int32Array.from([1, 2, 3]));
  depth.iterations = 3;
  let msg = '';
  await dec.step(Int32Array.of(4)).catch((e: Error) => (msg = e.message));
  equal(msg.includes('the prefill cached 2 core iterations but the model now runs 3'), true, msg);
  dec.reset();
  await dec.prefill(Int32Array.from([1, 2, 3]));
  await dec.step(Int32Array.of(4));
  equal(
    dec.cache.layerCount,
    2 + 3,
    'caches of the 2-iteration prefill kept, the third iteration added on the new prefill',
  );
  dec.release();
  model.params.destroy();
});
