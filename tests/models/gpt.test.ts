import { gpuTest } from '../util/gpu.ts';
import { assertClose, assertFiniteDiff, assertRelRms, rng } from '../util/assert.ts';
import { GPT, type GPTConfig, gptParamSpecs } from '../../src/models/gpt.ts';
import { Tape } from '../../src/autograd/tape.ts';
import { RULES } from '../../src/autograd/rules.ts';
import { gptLossAndGradsRef } from '../../src/reference/gpt.ts';

function batch(cfg: GPTConfig, b: number, t: number, seed: number) {
  const r = rng(seed);
  const tokens = Int32Array.from({ length: b * t }, () => Math.floor(r() * cfg.vocabSize));
  const targets = Int32Array.from({ length: b * t }, () => Math.floor(r() * cfg.vocabSize));
  return { tokens, targets };
}

Deno.test('GPT f64 reference: gradients of every parameter match finite differences', () => {
  const cfg: GPTConfig = { vocabSize: 11, blockSize: 6, nLayer: 2, nHead: 2, nEmbd: 8, bias: true };
  const r = rng(3);
  const params = new Map(
    gptParamSpecs(cfg).map((s) => {
      const n = s.shape.reduce((a, b) => a * b, 1);
      return [
        s.name,
        Float64Array.from({ length: n }, () => (s.init.kind === 'const' ? s.init.value : 0) + 0.3 * (r() - 0.5)),
      ];
    }),
  );
  const { tokens, targets } = batch(cfg, 2, 5, 4);
  const { grads } = gptLossAndGradsRef(cfg, params, tokens, targets, 2, 5);
  for (const [name, p] of params) {
    assertFiniteDiff(
      (v) => {
        const saved = params.get(name)!;
        params.set(name, v as Float64Array<ArrayBuffer>);
        const l = gptLossAndGradsRef(cfg, params, tokens, targets, 2, 5).loss;
        params.set(name, saved);
        return l;
      },
      p,
      grads.get(name)!,
      name,
      { samples: 6, tol: 1e-6 },
    );
  }
});

for (
  const [cfg, b, t] of [
    [{ vocabSize: 65, blockSize: 9, nLayer: 2, nHead: 3, nEmbd: 24, bias: true }, 2, 7],
    [{ vocabSize: 13, blockSize: 17, nLayer: 1, nHead: 2, nEmbd: 32, bias: false }, 3, 17],
    [{ vocabSize: 65, blockSize: 9, nLayer: 2, nHead: 3, nEmbd: 24, bias: true, attention: 'naive' }, 2, 7],
  ] as [GPTConfig, number, number][]
) {
  gpuTest(
    `GPT on the GPU matches the f64 reference: loss and every gradient (L=${cfg.nLayer}, C=${cfg.nEmbd}, T=${t}, bias=${cfg.bias}, ${
      cfg.attention ?? 'flash'
    } attention)`,
    async (gpu) => {
      const model = new GPT(gpu, cfg, 11);
      const params = new Map<string, Float64Array>();
      const flat = await gpu.read(model.params.values);
      for (const p of model.params.params) {
        params.set(p.name, Float64Array.from(flat.subarray(p.offset, p.offset + p.size)));
      }
      const { tokens, targets } = batch(cfg, b, t, 5);
      const ref = gptLossAndGradsRef(cfg, params, tokens, targets, b, t);

      const tTok = gpu.upload(tokens, [b, t], 'i32');
      const tTgt = gpu.upload(targets, [b, t], 'i32');
      model.params.zeroGrad();
      const tape = new Tape(gpu, model.params.gradMap());
      const { loss } = await model.forward(tape, tTok, tokens, tTgt, b, t);
      tape.backward(RULES);
      const got = await gpu.read(loss!);
      assertClose([got[0]], [ref.loss], 'loss');
      const g = await gpu.read(model.params.grads);
      for (const p of model.params.params) {
        const mine = g.subarray(p.offset, p.offset + p.size);
        assertRelRms(mine, ref.grads.get(p.name)!, `grad ${p.name}`);
      }
      tape.dispose();
      for (const x of [tTok, tTgt]) {
        x.release();
      }
      model.params.destroy();
    },
  );
}

gpuTest(
  'gradient accumulation: two micro-batches at gradScale ½ give the mean of their reference gradients',
  async (gpu) => {
    const cfg: GPTConfig = { vocabSize: 65, blockSize: 8, nLayer: 1, nHead: 2, nEmbd: 16, bias: true };
    const b = 2, t = 8;
    const model = new GPT(gpu, cfg, 5);
    const flat = await gpu.read(model.params.values);
    const params = new Map(
      model.params.params.map((p) => [p.name, Float64Array.from(flat.subarray(p.offset, p.offset + p.size))]),
    );
    const batches = [batch(cfg, b, t, 21), batch(cfg, b, t, 22)];
    const refs = batches.map((x) => gptLossAndGradsRef(cfg, params, x.tokens, x.targets, b, t));
    model.params.zeroGrad();
    for (const x of batches) {
      const tTok = gpu.upload(x.tokens, [b, t], 'i32'), tTgt = gpu.upload(x.targets, [b, t], 'i32');
      const tape = new Tape(gpu, model.params.gradMap());
      await model.forward(tape, tTok, x.tokens, tTgt, b, t, { gradScale: 0.5 });
      tape.backward(RULES);
      tape.dispose();
      tTok.release();
      tTgt.release();
    }
    const g = await gpu.read(model.params.grads);
    for (const p of model.params.params) {
      const mean = refs[0].grads.get(p.name)!.map((v, i) => 0.5 * (v + refs[1].grads.get(p.name)![i]));
      assertRelRms(g.subarray(p.offset, p.offset + p.size), mean, `accumulated grad ${p.name}`);
    }
    model.params.destroy();
  },
);
