/**
 * The MoE GPT (src/models/moe.ts) end to end on the GPU: one MoE MLP against the f64
 * reference (drops included), every parameter's tape gradient against central differences of
 * the GPU loss (tests/util/grad_check.ts) with the routing held fixed, the load-balancing loss
 * against a host computation, and 30 training steps on Tiny Shakespeare.
 */
import { deepStrictEqual, equal, ok } from 'node:assert/strict';
import { gpuTest } from '../util/gpu.ts';
import { assertClose, assertThrows, rng } from '../util/assert.ts';
import { gradientMismatches } from '../util/grad_check.ts';
import { Tape } from '../../src/autograd/tape.ts';
import { RULES } from '../../src/autograd/rules.ts';
import { expertOf, GPTMoE, type MoEConfig, moeParamSpecs, validateMoEConfig } from '../../src/models/moe.ts';
import type { GPTConfig } from '../../src/models/gpt.ts';
import { assignSlotsRef, auxLossRef, moeMlpRef, topKRef } from '../../src/reference/moe.ts';
import { Trainer } from '../../src/train/trainer.ts';
import { parseConfig } from '../../src/train/config.ts';
import { CharTokenizer } from '../../src/data/tokenizer.ts';
import { TextDataset } from '../../src/data/dataset.ts';
import type { Gpu } from '../../src/gpu/context.ts';
import { Tensor } from '../../src/gpu/tensor.ts';
import { matmulTuning } from '../../src/kernels/matmul.ts';

const GPT: GPTConfig = { vocabSize: 13, blockSize: 24, nLayer: 2, nHead: 2, nEmbd: 32, bias: true };

/** Moves the weights off their small initial values so every path carries a visible gradient. */
async function perturb(gpu: Gpu, model: GPTMoE, seed: number, scale: number): Promise<Float32Array> {
  const r = rng(seed);
  const base = Float32Array.from(await gpu.read(model.params.values));
  for (let i = 0; i < base.length; i++) base[i] += scale * (r() - 0.5);
  gpu.write(model.params.values, base);
  return base;
}

gpuTest(
  'one MoE MLP (top-1 and top-2, with drops; CPU and GPU matmul paths) matches the f64 reference',
  async (gpu) => {
    for (const [topK, tiled] of [[1, false], [2, false], [2, true]] as const) {
      // The per-expert blocks are aligned views; the shared-memory kernel GPUs use must accept them too.
      matmulTuning.forceTiled = tiled;
      const moe: MoEConfig = { nExpert: 4, topK, capacityFactor: 0.75, auxLossWeight: 0.01, moeEvery: 1, groups: 2 };
      const model = new GPTMoE(gpu, GPT, moe, 3);
      const base = await perturb(gpu, model, 4, 0.4);
      const n = 30, c = GPT.nEmbd;
      const r = rng(5);
      const x = Float32Array.from({ length: n * c }, () => 2 * r() - 1);
      const tape = new Tape(gpu, new Map(), false);
      const y = model.moeLocal(tape, { layer: 1, x: gpu.upload(x, [n, c]), tape });
      const got = await gpu.read(y);
      const w = (name: string) => {
        const p = model.params.get(`transformer.h.1.mlp.${name}`);
        return base.subarray(p.offset, p.offset + p.size);
      };
      const experts = [0, 1, 2, 3].map((e) => ({
        fc: w(`experts.${e}.c_fc.weight`),
        fcB: w(`experts.${e}.c_fc.bias`),
        proj: w(`experts.${e}.c_proj.weight`),
        projB: w(`experts.${e}.c_proj.bias`),
      }));
      const plan = model.lastRouting[0].plan;
      const ref = moeMlpRef(x, w('router.weight'), experts, plan, c, topK > 1);
      ok(ref.slot.some((s) => s < 0), 'capacity 0.75 drops some choices');
      deepStrictEqual(
        Int32Array.from(await gpu.read(model.lastRouting[0].slot)),
        ref.slot,
        `top-${topK} tiled=${tiled}: slots`,
      );
      assertClose(got, ref.y, `top-${topK} tiled=${tiled}: MoE MLP output`);
      tape.dispose();
      model.params.destroy();
      matmulTuning.forceTiled = false;
    }
  },
);

async function routingOf(gpu: Gpu, model: GPTMoE): Promise<string> {
  const parts: string[] = [];
  for (const r of model.lastRouting) parts.push([...await gpu.read(r.top), '|', ...await gpu.read(r.slot)].join(','));
  return parts.join('/');
}

gpuTest(
  'every parameter gradient matches a central difference of the GPU loss (aux loss on, routing fixed)',
  async (gpu) => {
    const moe: MoEConfig = { nExpert: 4, topK: 2, capacityFactor: 1, auxLossWeight: 0.1, moeEvery: 1 };
    // One layer: every parameter kind of a MoE block once; each routing-guarded difference costs a recording forward.
    const model = new GPTMoE(gpu, { ...GPT, nLayer: 1 }, moe, 5);
    const b = 2, t = 19;
    const r = rng(9);
    const tokens = Int32Array.from({ length: b * t }, () => Math.floor(r() * 13));
    const targets = Int32Array.from({ length: b * t }, () => Math.floor(r() * 13));
    const tTok = gpu.upload(tokens, [b, t], 'i32'), tTgt = gpu.upload(targets, [b, t], 'i32');
    const base = await perturb(gpu, model, 11, 0.3);
    model.params.zeroGrad();
    const tape = new Tape(gpu, model.params.gradMap());
    await model.forward(tape, tTok, tokens, tTgt, b, t);
    const routing = await routingOf(gpu, model);
    ok(routing.split(',').includes('-1'), 'capacity 1 with top-2 drops some choices');
    tape.backward(RULES);
    tape.dispose();
    const grads = await gpu.read(model.params.grads);
    // A recording tape, so the loss includes the load-balancing term whose gradient the tape took.
    const lossAt = async (v: Float32Array) => {
      gpu.write(model.params.values, v);
      const tp = new Tape(gpu, model.params.gradMap());
      const { loss } = await model.forward(tp, tTok, tokens, tTgt, b, t);
      const out = (await gpu.read(loss!))[0];
      const rt = await routingOf(gpu, model);
      tp.dispose();
      return { out, same: rt === routing };
    };
    const { bad, strong } = await gradientMismatches(model.params.params, grads, base, async (v) => {
      const { out, same } = await lossAt(v);
      return same ? out : NaN;
    });
    ok(bad.length === 0, `gradients disagree:\n${bad.join('\n')}`);
    ok(
      strong >= 0.6 * model.params.params.length,
      `only ${strong} of ${model.params.params.length} tensors have a gradient above 1e-3`,
    );
    model.params.destroy();
  },
);

gpuTest('the load-balancing loss equals α·E·Σ f_e·P_e computed on the host, summed over MoE layers', async (gpu) => {
  const moe: MoEConfig = { nExpert: 4, topK: 1, capacityFactor: 1.25, auxLossWeight: 0.05, moeEvery: 1, groups: 2 };
  const model = new GPTMoE(gpu, GPT, moe, 7);
  await perturb(gpu, model, 2, 0.5);
  const b = 2, t = 16;
  const r = rng(3);
  const tokens = Int32Array.from({ length: b * t }, () => Math.floor(r() * 13));
  const tTok = gpu.upload(tokens, [b, t], 'i32'), tTgt = gpu.upload(tokens.map((x) => (x + 1) % 13), [b, t], 'i32');
  const tape = new Tape(gpu, model.params.gradMap());
  const { loss } = await model.forward(tape, tTok, tokens, tTgt, b, t);
  const full = await gpu.read(loss!);
  let want = 0;
  for (const rt of model.lastRouting) {
    const probs = await gpu.read(rt.probs);
    const top = topKRef(probs, b * t, 4, 1);
    deepStrictEqual(Int32Array.from(await gpu.read(rt.top)), top, 'the GPU chose the host top-1');
    want += auxLossRef(probs, assignSlotsRef(top, rt.plan).load, rt.plan, moe.auxLossWeight).loss;
  }
  const aux = (await gpu.read(new Tensor(gpu, loss!.buffer, [3], 'f32', loss!.offset, false)))[2];
  tape.dispose();
  ok(want > 0.05, `α·E·Σ f·P ≥ α per layer: ${want}`);
  assertClose([aux], [want], 'aux loss', 1e-6, 1e-5);
  const evalTape = new Tape(gpu, new Map(), false);
  const ce = (await gpu.read((await model.forward(evalTape, tTok, tokens, tTgt, b, t)).loss!))[0];
  evalTape.dispose();
  assertClose([full[0]], [ce + want], 'training loss = cross-entropy + aux', 1e-5, 1e-5);
  model.params.destroy();
});

gpuTest('loss falls over 30 steps on Tiny Shakespeare (top-2, MoE every other block)', async (gpu) => {
  const text = await Deno.readTextFile(new URL('../../public/data/tinyshakespeare.txt', import.meta.url));
  const tok = CharTokenizer.fromText(text);
  const cfg = parseConfig({
    nLayer: 2,
    nHead: 2,
    nEmbd: 32,
    blockSize: 32,
    batchSize: 8,
    steps: 30,
    warmup: 3,
    lr: 1e-2,
    minLr: 1e-3,
    evalBatches: 2,
    logInterval: 30,
  });
  const data = new TextDataset(tok.encode(text), cfg.blockSize);
  const gpt: GPTConfig = { vocabSize: tok.vocabSize, blockSize: 32, nLayer: 2, nHead: 2, nEmbd: 32, bias: cfg.bias };
  const model = new GPTMoE(
    gpu,
    gpt,
    { nExpert: 4, topK: 2, capacityFactor: 1.25, auxLossWeight: 0.01, moeEvery: 2 },
    cfg.seed,
  );
  equal(model.params.params.filter((p) => expertOf(p.name)).length, 4 * (cfg.bias ? 4 : 2), 'experts in block 1 only');
  const trainer = new Trainer(gpu, model, data, cfg);
  const init = await trainer.evaluate('val');
  ok(Math.abs(init - Math.log(tok.vocabSize)) < 0.15, `initial val loss ${init} ≈ ln V`);
  for (let s = 0; s < cfg.steps; s++) await trainer.step(s);
  const recs = await trainer.drain();
  const first = recs.slice(0, 5).reduce((a, x) => a + x.loss, 0) / 5;
  const last = recs.slice(-5).reduce((a, x) => a + x.loss, 0) / 5;
  ok(recs.every((x) => Number.isFinite(x.loss)), 'finite losses');
  ok(last < first - 0.4, `loss falls: ${first.toFixed(3)} → ${last.toFixed(3)}`);
  model.params.destroy();
});

gpuTest("configs and shards are checked; parameter layout replaces only the MoE blocks' MLPs", async (gpu) => {
  const ok1: MoEConfig = { nExpert: 4, topK: 2, capacityFactor: 1, auxLossWeight: 0, moeEvery: 2 };
  assertThrows(() => validateMoEConfig({ ...ok1, topK: 3 }), 'topK must be 1 or 2, got 3');
  assertThrows(() => validateMoEConfig({ ...ok1, nExpert: 1 }), 'topK 2 exceeds nExpert 1');
  assertThrows(() => validateMoEConfig({ ...ok1, capacityFactor: 0 }), 'capacityFactor must be > 0');
  assertThrows(() => validateMoEConfig({ ...ok1, moeEvery: 0 }), 'moeEvery must be a positive integer');
  const names = moeParamSpecs(GPT, ok1).map((s) => s.name);
  ok(
    names.includes('transformer.h.0.mlp.c_fc.weight') && !names.includes('transformer.h.1.mlp.c_fc.weight'),
    'block 0 dense, block 1 MoE',
  );
  ok(
    names.includes('transformer.h.1.mlp.router.weight') && names.includes('transformer.h.1.mlp.experts.3.c_proj.bias'),
    'router and experts',
  );
  assertThrows(() => new GPTMoE(gpu, GPT, ok1, 1, { first: 3, count: 2 }), 'expert shard [3, 5) is not inside 0 … 4');
  // A shard holds exactly the full model's weights for its experts.
  const full = new GPTMoE(gpu, GPT, ok1, 1), half = new GPTMoE(gpu, GPT, ok1, 1, { first: 2, count: 2 });
  const [fv, hv] = [await gpu.read(full.params.values), await gpu.read(half.params.values)];
  for (const p of half.params.params) {
    const q = full.params.get(p.name);
    deepStrictEqual(hv.subarray(p.offset, p.offset + p.size), fv.subarray(q.offset, q.offset + q.size), p.name);
  }
  ok(!half.params.params.some((p) => p.name.includes('experts.1.')), 'no foreign experts');
  const tokens = new Int32Array(8);
  assertThrows(
    () => half.forward(new Tape(gpu), gpu.upload(tokens, [1, 8], 'i32'), tokens, null, 1, 8),
    'holds a shard of the experts',
  );
  full.params.destroy();
  half.params.destroy();
});
