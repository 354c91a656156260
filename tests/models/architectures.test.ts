/**
 * Every `--arch` end to end on the GPU: the loss at initialisation is ln(V), the tape's
 * gradient of every parameter tensor agrees with a central difference of the GPU loss (which
 * catches a mis-wired rule even where each kernel is right), and 50 steps on Tiny Shakespeare
 * bring the loss down.
 *
 * Every tensor is checked along its gradient and random directions (tests/util/grad_check.ts).
 * Weights are first moved off their small initial values (and Mamba's Δ made large) so every
 * path, the scan's included, carries a gradient well above f32 noise. For MoE models
 * (mamba-moe; gpt-moe has the same check in moe.test.ts) the loss is taken on recording tapes,
 * so it includes the load-balancing term whose gradient the tape took, and a difference counts
 * only when both sides route every token as the base point does.
 */
import { ok } from 'node:assert/strict';
import { gpuTest } from '../util/gpu.ts';
import { rng } from '../util/assert.ts';
import { gradientMismatches } from '../util/grad_check.ts';
import { Tape } from '../../src/autograd/tape.ts';
import { RULES } from '../../src/autograd/rules.ts';
import { createModel } from '../../src/models/registry.ts';
import type { LanguageModel } from '../../src/models/model.ts';
import type { MoELanguageModel } from '../../src/models/moe_layer.ts';
import { Trainer } from '../../src/train/trainer.ts';
import { parseConfig, type TrainConfig } from '../../src/train/config.ts';
import { CharTokenizer } from '../../src/data/tokenizer.ts';
import { TextDataset } from '../../src/data/dataset.ts';
import type { Gpu } from '../../src/gpu/context.ts';
import type { Tensor } from '../../src/gpu/tensor.ts';

const text = await Deno.readTextFile(new URL('../../public/data/tinyshakespeare.txt', import.meta.url));
const tok = CharTokenizer.fromText(text);

const ARCH_CASES: [string, Partial<TrainConfig>][] = [
  ['linear', { arch: 'linear', linearDecay: 'head' }],
  ['linear', { arch: 'linear', linearDecay: 'channel' }],
  ['mamba', { arch: 'mamba' }],
  ['hybrid', { arch: 'hybrid', attnEvery: 1 }],
  // top-2 with capacity 1 so tokens are dropped; aux loss on; MoE after the Mamba mixer. One layer: the
  // layered wiring is the mamba case's, and each routing-guarded difference costs a recording forward.
  ['mamba-moe', {
    arch: 'mamba-moe',
    nExpert: 4,
    moeTopK: 2,
    capacityFactor: 1,
    auxLossWeight: 0.1,
    moeEvery: 1,
    nLayer: 1,
  }],
  // Core 1 + coda 1 at nLayer 2; r = 3 in both the recording and the differenced forwards (k = 8: no truncation).
  ['recurrent-depth', { arch: 'recurrent-depth', preludeLayers: 0, recurIters: 3 }],
];

/** The routing of every MoE layer of the last forward ('' for models without MoE layers). */
async function routingOf(gpu: Gpu, model: LanguageModel): Promise<string> {
  const layers = (model as Partial<MoELanguageModel>).moeLayers;
  const parts: string[] = [];
  for (const r of layers?.lastRouting ?? []) {
    parts.push([...await gpu.read(r.top), '|', ...await gpu.read(r.slot)].join(','));
  }
  return parts.join('/');
}

/** The loss (recording tape for MoE models: training loss with the aux term) and the routing it used. */
async function lossOf(
  gpu: Gpu,
  model: LanguageModel,
  tTok: Tensor,
  tokens: Int32Array,
  tTgt: Tensor,
  b: number,
  t: number,
): Promise<{ loss: number; routing: string }> {
  const tape = new Tape(gpu, 'moeLayers' in model ? model.params.gradMap() : new Map(), 'moeLayers' in model);
  const { loss } = await model.forward(tape, tTok, tokens, tTgt, b, t);
  const v = (await gpu.read(loss!))[0];
  const routing = await routingOf(gpu, model);
  tape.dispose();
  return { loss: v, routing };
}

for (const [arch, extra] of ARCH_CASES) {
  const label = `${arch}${extra.linearDecay ? ` (${extra.linearDecay} decay)` : ''}`;

  gpuTest(`${label}: every parameter's gradient matches a central difference of the GPU loss`, async (gpu) => {
    const cfg = parseConfig({ nLayer: 2, ...extra, nHead: 2, nEmbd: 32, blockSize: 24, batchSize: 2 });
    const model = createModel(gpu, cfg, 13, 5);
    const b = 2, t = 19; // ragged: not a multiple of any chunk
    const r = rng(9);
    const tokens = Int32Array.from({ length: b * t }, () => Math.floor(r() * 13));
    const targets = Int32Array.from({ length: b * t }, () => Math.floor(r() * 13));
    const tTok = gpu.upload(tokens, [b, t], 'i32');
    const tTgt = gpu.upload(targets, [b, t], 'i32');
    const base = Float32Array.from(await gpu.read(model.params.values));
    for (let i = 0; i < base.length; i++) base[i] += 0.3 * (r() - 0.5);
    for (const p of model.params.params) {
      if (p.name.endsWith('dt_proj.bias')) { for (let i = 0; i < p.size; i++) base[p.offset + i] += 3; // Δ ≈ softplus(3)
       }
    }
    gpu.write(model.params.values, base);
    model.params.zeroGrad();
    const tape = new Tape(gpu, model.params.gradMap());
    await model.forward(tape, tTok, tokens, tTgt, b, t);
    const routing = await routingOf(gpu, model);
    if (routing) ok(routing.split(',').includes('-1'), 'capacity 1 with top-2 drops some choices');
    tape.backward(RULES);
    tape.dispose();
    const grads = await gpu.read(model.params.grads);
    const { bad, strong } = await gradientMismatches(model.params.params, grads, base, async (v) => {
      gpu.write(model.params.values, v);
      const at = await lossOf(gpu, model, tTok, tokens, tTgt, b, t);
      return at.routing === routing ? at.loss : NaN;
    });
    ok(bad.length === 0, `gradients disagree:\n${bad.join('\n')}`);
    // Not vacuous: most tensors' gradients are far above the noise floor.
    ok(
      strong >= 0.6 * model.params.params.length,
      `only ${strong} of ${model.params.params.length} tensors have a gradient above 1e-3`,
    );
    model.params.destroy();
  });

  gpuTest(`${label}: loss starts at ln(V) and falls over 50 steps on Tiny Shakespeare`, async (gpu) => {
    const cfg = parseConfig({
      ...extra,
      nLayer: 2,
      nHead: 2,
      nEmbd: 32,
      blockSize: 32,
      batchSize: 8,
      steps: 50,
      warmup: 5,
      lr: 1e-2,
      minLr: 1e-3,
      evalBatches: 2,
      logInterval: 50,
    });
    const data = new TextDataset(tok.encode(text), cfg.blockSize);
    const model = createModel(gpu, cfg, tok.vocabSize);
    const trainer = new Trainer(gpu, model, data, cfg);
    const init = await trainer.evaluate('val');
    ok(
      Math.abs(init - Math.log(tok.vocabSize)) < 0.15,
      `initial val loss ${init} ≈ ln(${tok.vocabSize}) = ${Math.log(tok.vocabSize)}`,
    );
    for (let s = 0; s < cfg.steps; s++) await trainer.step(s);
    const recs = await trainer.drain();
    const first = recs.slice(0, 5).reduce((a, x) => a + x.loss, 0) / 5;
    const last = recs.slice(-5).reduce((a, x) => a + x.loss, 0) / 5;
    ok(recs.every((x) => Number.isFinite(x.loss)), 'finite losses');
    ok(last < first - 0.5, `loss falls: ${first.toFixed(3)} → ${last.toFixed(3)}`);
    model.params.destroy();
  });
}
