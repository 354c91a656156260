/**
 * The row-chunked LM head inside whole models (src/models/head.ts): a training step's loss and
 * every parameter gradient equal the unchunked step's for GPT, GPT-MoE and Mamba (context.ts
 * LOCAL.head), and a GPT whose logits (B·T, V) exceed the device's storage binding limit trains.
 */
import { equal, ok } from 'node:assert/strict';
import { gpuTest, testBackend } from '../util/gpu.ts';
import { assertClose, assertRelRms, rng } from '../util/assert.ts';
import { Tape } from '../../src/autograd/tape.ts';
import { RULES } from '../../src/autograd/rules.ts';
import { createModel } from '../../src/models/registry.ts';
import { GPT } from '../../src/models/gpt.ts';
import { headTuning } from '../../src/models/head.ts';
import type { LanguageModel } from '../../src/models/model.ts';
import { parseConfig, type TrainConfig } from '../../src/train/config.ts';
import { Trainer } from '../../src/train/trainer.ts';
import { TextDataset } from '../../src/data/dataset.ts';
import { DeviceLimitError } from '../../src/gpu/limits.ts';
import { Gpu } from '../../src/gpu/context.ts';

/** Loss (2) and the flat gradient of one forward + backward with the head capped at `maxRows` rows per chunk. */
async function step(
  gpu: Gpu,
  model: LanguageModel,
  tokens: Int32Array,
  targets: Int32Array,
  b: number,
  t: number,
  maxRows: number,
) {
  headTuning.maxRows = maxRows;
  try {
    const tTok = gpu.upload(tokens, [b, t], 'i32'), tTgt = gpu.upload(targets, [b, t], 'i32');
    model.params.zeroGrad();
    const tape = new Tape(gpu, model.params.gradMap());
    const { logits, loss } = await model.forward(tape, tTok, tokens, tTgt, b, t, { gradScale: 0.5 });
    tape.backward(RULES);
    const out = {
      loss: await gpu.read(loss!) as Float32Array,
      grads: await gpu.read(model.params.grads) as Float32Array,
      chunked: logits === null,
    };
    tape.dispose();
    tTok.release();
    tTgt.release();
    return out;
  } finally {
    headTuning.maxRows = 0;
  }
}

const V = 53, B = 4, T = 40; // N = 160 rows: chunks of 64, 64, 32
const ARCHS: [string, Partial<TrainConfig>][] = [
  ['gpt', { arch: 'gpt' }],
  ['gpt-moe', { arch: 'gpt-moe', nExpert: 4, moeTopK: 2, capacityFactor: 1.25, auxLossWeight: 0.01, moeEvery: 1 }],
  ['mamba', { arch: 'mamba' }],
];

for (const [name, extra] of ARCHS) {
  for (const ignore of [false, true]) {
    gpuTest(
      `${name}: a training step with the LM head in row chunks gives the unchunked loss and every gradient (ignored targets: ${ignore})`,
      async (gpu) => {
        const cfg = parseConfig({ ...extra, nLayer: 1, nHead: 2, nEmbd: 16, blockSize: T, batchSize: B });
        const model = createModel(gpu, cfg, V, 7);
        const r = rng(ignore ? 2 : 1);
        const tokens = Int32Array.from({ length: B * T }, () => Math.floor(r() * V));
        // Ignored rows as goldfish masking makes them (targets −1), a whole chunk's worth included.
        const targets = Int32Array.from(
          { length: B * T },
          (_, i) => (ignore && (r() < 0.25 || (i >= 64 && i < 128)) ? -1 : Math.floor(r() * V)),
        );
        const ref = await step(gpu, model, tokens, targets, B, T, 0);
        const got = await step(gpu, model, tokens, targets, B, T, 64);
        ok(!ref.chunked && got.chunked, 'only the capped run is chunked');
        equal(got.loss[1], ref.loss[1], 'count of counted targets');
        if (!ignore) assertClose([got.loss[0]], [ref.loss[0]], 'loss');
        for (const p of model.params.params) {
          const [a, b] = [
            got.grads.subarray(p.offset, p.offset + p.size),
            ref.grads.subarray(p.offset, p.offset + p.size),
          ];
          if (b.every((x) => x === 0)) {
            ok(a.every((x) => x === 0), `grad ${p.name}: zero in the unchunked run, so in the chunked one`);
            continue;
          }
          assertClose(a, b, `grad ${p.name}`);
          assertRelRms(a, b, `grad ${p.name}`);
        }
        ok(ref.grads.some((x) => x !== 0), 'gradients flowed');
        model.params.destroy();
      },
    );
  }
}

// Dawn's adapters bind up to 1 GiB, which a T ≤ 1024 GPT cannot overflow: the device is opened
// with lavapipe's 128 MiB binding limit (WebGPU's default) so every backend runs the same case.
const BINDING = 128 * 2 ** 20;

Deno.test({
  name: 'a GPT whose logits (B·T, V = 50257) exceed the storage binding limit trains one step',
  sanitizeResources: false,
  sanitizeOps: false,
  fn: async () => {
    const gpu = await Gpu.create({ backend: testBackend(), maxLimits: { maxStorageBufferBindingSize: BINDING } });
    try {
      await overflowingStep(gpu);
    } finally {
      gpu.destroy();
    }
  },
});

async function overflowingStep(gpu: Gpu): Promise<void> {
  const vocab = 50257, b = 2;
  const lim = Math.min(gpu.device.limits.maxStorageBufferBindingSize, gpu.device.limits.maxBufferSize);
  equal(lim, BINDING, 'the device binds at most the capped size');
  const t = Math.ceil((Math.floor(lim / (4 * vocab)) + 1) / b); // the fewest positions that overflow a binding
  let err: unknown = null;
  try {
    gpu.empty([b * t, vocab]).release();
  } catch (e) {
    err = e;
  }
  ok(err instanceof DeviceLimitError, `unchunked logits (${b * t}, ${vocab}) do not fit one binding of ${lim} bytes`);
  const r = rng(9);
  const data = new TextDataset(Int32Array.from({ length: 20 * t }, () => Math.floor(r() * vocab)), t);
  const cfg = parseConfig({
    nLayer: 1,
    nHead: 2,
    nEmbd: 16,
    blockSize: t,
    batchSize: b,
    steps: 1,
    warmup: 0,
    evalBatches: 1,
    logInterval: 1,
  });
  const model = new GPT(gpu, { vocabSize: vocab, blockSize: t, nLayer: 1, nHead: 2, nEmbd: 16, bias: true }, 1);
  const trainer = new Trainer(gpu, model, data, cfg);
  await trainer.step(0);
  const [rec] = await trainer.drain();
  ok(Math.abs(rec.loss - Math.log(vocab)) < 0.2, `initial loss ${rec.loss} ≈ ln(${vocab}) = ${Math.log(vocab)}`);
  ok(Number.isFinite(rec.gradNorm) && rec.gradNorm > 0, `gradient norm ${rec.gradNorm} is finite and positive`);
  model.params.destroy();
}
