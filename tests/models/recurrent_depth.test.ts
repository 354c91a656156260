/**
 * The recurrent-depth model (src/models/recurrent_depth.ts, docs/design.md#recurrent-depth): its f64
 * reference against finite differences; the GPU model's loss and every gradient against that
 * reference, with and without truncated backprop and input injection; r = 1 without injection
 * equal to a plain GPT of the same blocks; recomputation giving the same gradients.
 */
import { equal, ok } from 'node:assert/strict';
import { gpuTest } from '../util/gpu.ts';
import { assertClose, assertFiniteDiff, assertRelRms, rng } from '../util/assert.ts';
import {
  RecurrentDepth,
  type RecurrentDepthConfig,
  recurrentDepthParamSpecs,
} from '../../src/models/recurrent_depth.ts';
import { GPT } from '../../src/models/gpt.ts';
import { recurrentDepthLossAndGradsRef } from '../../src/reference/recurrent_depth.ts';
import { Tape } from '../../src/autograd/tape.ts';
import { RULES } from '../../src/autograd/rules.ts';
import type { Gpu } from '../../src/gpu/context.ts';
import type { LanguageModel } from '../../src/models/model.ts';
import type { Recompute } from '../../src/models/recompute.ts';

const base: RecurrentDepthConfig = {
  vocabSize: 11,
  blockSize: 7,
  nLayer: 3,
  nHead: 2,
  nEmbd: 8,
  bias: true,
  preludeLayers: 1,
  codaLayers: 1,
  recurIters: 3,
  recurBackprop: 8,
  recurInject: true,
  evalIterations: 3,
};

function batch(v: number, b: number, t: number, seed: number) {
  const r = rng(seed), draw = () => Int32Array.from({ length: b * t }, () => Math.floor(r() * v));
  return { tokens: draw(), targets: draw() };
}

Deno.test('recurrent-depth f64 reference: every gradient matches finite differences (injection, 3 iterations)', () => {
  for (const cfg of [base, { ...base, recurInject: false, preludeLayers: 0, nLayer: 2 }]) {
    const r = rng(3);
    const params = new Map(
      recurrentDepthParamSpecs(cfg).map((s) => {
        const n = s.shape.reduce((a, b) => a * b, 1);
        return [
          s.name,
          Float64Array.from({ length: n }, () => (s.init.kind === 'const' ? s.init.value : 0) + 0.3 * (r() - 0.5)),
        ];
      }),
    );
    const { tokens, targets } = batch(cfg.vocabSize, 2, 5, 4);
    const lossAt = () => recurrentDepthLossAndGradsRef(cfg, params, tokens, targets, 2, 5, 3);
    const { grads } = lossAt();
    for (const [name, p] of params) {
      assertFiniteDiff(
        (v) => {
          const saved = params.get(name)!;
          params.set(name, v as Float64Array<ArrayBuffer>);
          const l = lossAt().loss;
          params.set(name, saved);
          return l;
        },
        p,
        grads.get(name)!,
        `${name} (inject ${cfg.recurInject})`,
        { samples: 4, tol: 1e-6 },
      );
    }
  }
});

/** Weights moved off their initial values, so every path carries a gradient well above f32 noise. */
async function perturbed(gpu: Gpu, model: LanguageModel, seed: number): Promise<Map<string, Float64Array>> {
  const flat = Float32Array.from(await gpu.read(model.params.values)), r = rng(seed);
  for (let i = 0; i < flat.length; i++) flat[i] += 0.2 * (r() - 0.5);
  gpu.write(model.params.values, flat);
  return new Map(
    model.params.params.map((p) => [p.name, Float64Array.from(flat.subarray(p.offset, p.offset + p.size))]),
  );
}

/** Loss and flat gradients of one recording forward + backward on the GPU. */
async function gpuLossGrads(
  gpu: Gpu,
  model: LanguageModel,
  tokens: Int32Array,
  targets: Int32Array,
  b: number,
  t: number,
  recompute: Recompute = 'none',
): Promise<{ loss: number; grads: Float32Array }> {
  const tTok = gpu.upload(tokens, [b, t], 'i32'), tTgt = gpu.upload(targets, [b, t], 'i32');
  model.params.zeroGrad();
  const tape = new Tape(gpu, model.params.gradMap());
  const { loss } = await model.forward(tape, tTok, tokens, tTgt, b, t, { recompute });
  await tape.backwardAsync(RULES);
  const out = { loss: (await gpu.read(loss!))[0], grads: Float32Array.from(await gpu.read(model.params.grads)) };
  tape.dispose();
  tTok.release();
  tTgt.release();
  return out;
}

const CASES: [string, Partial<RecurrentDepthConfig>, number][] = [
  ['injection, r 4, backprop through the last 2', { recurBackprop: 2 }, 4],
  ['injection, r 3, full backprop, 2 core blocks, no prelude, no biases', {
    nLayer: 3,
    preludeLayers: 0,
    bias: false,
  }, 3],
  ['no injection, r 3, backprop through the last 3', { recurInject: false, recurBackprop: 3 }, 3],
];

for (const [what, over, r] of CASES) {
  gpuTest(`recurrent-depth on the GPU matches the f64 reference: loss and every gradient (${what})`, async (gpu) => {
    const cfg = { ...base, ...over }, b = 2, t = 6;
    const model = new RecurrentDepth(gpu, cfg, 11);
    model.iterations = r;
    const params = await perturbed(gpu, model, 7);
    const { tokens, targets } = batch(cfg.vocabSize, b, t, 5);
    const ref = recurrentDepthLossAndGradsRef(cfg, params, tokens, targets, b, t, r);
    const got = await gpuLossGrads(gpu, model, tokens, targets, b, t);
    assertClose([got.loss], [ref.loss], 'loss');
    for (const p of model.params.params) {
      assertRelRms(got.grads.subarray(p.offset, p.offset + p.size), ref.grads.get(p.name)!, `grad ${p.name}`);
    }
    if (cfg.recurBackprop < r) {
      // Not vacuous: the untruncated gradients of the core differ from the truncated ones.
      const full = recurrentDepthLossAndGradsRef({ ...cfg, recurBackprop: r }, params, tokens, targets, b, t, r);
      const name = 'transformer.h.1.core.0.attn.c_attn.weight', a = ref.grads.get(name)!, f = full.grads.get(name)!;
      const rel = Math.hypot(...a.map((x, i) => x - f[i])) / Math.hypot(...f);
      ok(rel > 1e-2, `truncation changes the core's gradient (relative difference ${rel})`);
    }
    model.params.destroy();
  });
}

gpuTest('recurrent-depth with r = 1 and no injection equals a plain GPT of its P + R + Q blocks', async (gpu) => {
  const cfg = { ...base, nLayer: 4, recurInject: false, evalIterations: 1 }, b = 2, t = 7;
  const rd = new RecurrentDepth(gpu, cfg, 3), gpt = new GPT(gpu, cfg, 4);
  await perturbed(gpu, rd, 8);
  // Core block j is named transformer.h.P.core.j; in the plain GPT it is block P + j, the coda after it.
  const gptName = (n: string) =>
    n.replace(/^transformer\.h\.2\./, 'transformer.h.3.')
      .replace(/^transformer\.h\.1\.core\.(\d+)\./, (_, j) => `transformer.h.${1 + Number(j)}.`);
  const values = await gpu.read(rd.params.values), mine = new Float32Array(gpt.params.flatSize);
  const at = new Map(gpt.params.params.map((p) => [p.name, p]));
  equal(rd.params.params.length, gpt.params.params.length, 'no adapter without injection');
  for (const p of rd.params.params) {
    mine.set(values.subarray(p.offset, p.offset + p.size), at.get(gptName(p.name))!.offset);
  }
  gpu.write(gpt.params.values, mine);
  const { tokens, targets } = batch(cfg.vocabSize, b, t, 9);
  const a = await gpuLossGrads(gpu, rd, tokens, targets, b, t), g = await gpuLossGrads(gpu, gpt, tokens, targets, b, t);
  assertClose([a.loss], [g.loss], 'loss', 1e-6, 1e-6);
  for (const p of rd.params.params) {
    const q = at.get(gptName(p.name))!;
    assertClose(
      a.grads.subarray(p.offset, p.offset + p.size),
      g.grads.subarray(q.offset, q.offset + q.size),
      p.name,
      1e-6,
      1e-5,
    );
  }
  // Not vacuous: at r = 2 the same weights give another loss.
  rd.iterations = 2;
  const two = await gpuLossGrads(gpu, rd, tokens, targets, b, t);
  ok(Math.abs(two.loss - g.loss) > 1e-3, `r = 2 differs from the plain stack (${two.loss} vs ${g.loss})`);
  rd.params.destroy();
  gpt.params.destroy();
});

for (const mode of ['full', 'selective'] as const) {
  gpuTest(
    `recurrent-depth: --recompute ${mode} gives the gradients of no recomputation (truncated core)`,
    async (gpu) => {
      const cfg = { ...base, recurBackprop: 2 }, b = 2, t = 6;
      const model = new RecurrentDepth(gpu, cfg, 12);
      model.iterations = 4;
      await perturbed(gpu, model, 2);
      const { tokens, targets } = batch(cfg.vocabSize, b, t, 6);
      const plain = await gpuLossGrads(gpu, model, tokens, targets, b, t);
      const again = await gpuLossGrads(gpu, model, tokens, targets, b, t, mode);
      assertClose([again.loss], [plain.loss], 'loss', 1e-6, 1e-6);
      assertRelRms(again.grads, plain.grads, 'every gradient', 1e-5);
      model.params.destroy();
    },
  );
}
