/**
 * Activation recomputation (src/autograd/checkpoint.ts, src/models/recompute.ts): the same
 * training run with `--recompute full` (every architecture written as pieces) and `selective`
 * (the attention core; the recurrent mixer cores of mamba, linear and hybrid) gives the losses,
 * gradients and parameters of the run without it, and the pool's peak during one forward +
 * backward is lower.
 */
import { equal, ok } from 'node:assert/strict';
import { gpuTest } from '../util/gpu.ts';
import { assertClose, assertRelRms, assertThrows } from '../util/assert.ts';
import { parseConfig, type TrainConfig } from '../../src/train/config.ts';
import { createModel } from '../../src/models/registry.ts';
import { Trainer } from '../../src/train/trainer.ts';
import { Tape } from '../../src/autograd/tape.ts';
import { RULES } from '../../src/autograd/rules.ts';
import { CharTokenizer } from '../../src/data/tokenizer.ts';
import { TextDataset } from '../../src/data/dataset.ts';
import type { Gpu } from '../../src/gpu/context.ts';

const TEXT = (await Deno.readTextFile(new URL('../../public/data/tinyshakespeare.txt', import.meta.url))).slice(
  0,
  4096,
);
const tok = CharTokenizer.fromText(TEXT);
const data = new TextDataset(tok.encode(TEXT), 128);

/** Losses of 3 steps, the step-0 gradient and the final parameters of one config. */
async function run(gpu: Gpu, over: Partial<TrainConfig>) {
  const cfg = parseConfig({
    nLayer: 3,
    nHead: 2,
    nEmbd: 32,
    blockSize: 32,
    batchSize: 4,
    steps: 3,
    warmup: 0,
    lr: 1e-2,
    dState: 4,
    attnEvery: 1,
    ...over,
  });
  const model = createModel(gpu, cfg, tok.vocabSize), trainer = new Trainer(gpu, model, data, cfg);
  await trainer.step(0);
  const grads0 = (await gpu.read(model.params.grads) as Float32Array).slice();
  for (let s = 1; s < cfg.steps; s++) await trainer.step(s);
  const losses = (await trainer.drain()).map((r) => r.loss);
  const params = await gpu.read(model.params.values) as Float32Array;
  const layout = model.params.params.map(({ name, offset, size }) => ({ name, offset, size }));
  // The pool's peak over one forward + backward of a fresh batch.
  const batch = data.batch('train', cfg.batchSize, cfg.blockSize, cfg.seed, 99, 0);
  const x = gpu.upload(batch.x, [cfg.batchSize, cfg.blockSize], 'i32'),
    y = gpu.upload(batch.y, [batch.y.length], 'i32');
  await gpu.sync();
  gpu.pool.resetPeak();
  const before = gpu.pool.stats.liveBytes, tape = new Tape(gpu, model.params.gradMap());
  await model.forward(tape, x, batch.x, y, cfg.batchSize, cfg.blockSize, { recompute: cfg.recompute });
  await tape.backwardAsync(RULES);
  const peak = gpu.pool.stats.peakBytes - before;
  tape.dispose();
  [x, y].forEach((t) => t.release());
  model.params.destroy();
  return { losses, grads0, params, peak, layout };
}

/** Step-0 gradients compared parameter by parameter: a lost input gradient shows in its layer's weights. */
function assertGradsPerParam(actual: Float32Array, ref: Float32Array, layout: Layout, what: string): void {
  for (const { name, offset, size } of layout) {
    assertRelRms(actual.subarray(offset, offset + size), ref.subarray(offset, offset + size), `${what}: ${name}`);
  }
}
type Layout = { name: string; offset: number; size: number }[];

for (const arch of ['gpt', 'mamba', 'hybrid', 'linear'] as const) {
  gpuTest(`recompute full on ${arch}: same losses (1e-5), gradients and parameters; lower peak`, async (gpu) => {
    const none = await run(gpu, { arch }), full = await run(gpu, { arch, recompute: 'full' });
    for (let i = 0; i < none.losses.length; i++) {
      ok(
        Math.abs(full.losses[i] - none.losses[i]) <= 1e-5 * Math.abs(none.losses[i]),
        `${arch} step ${i}: ${full.losses[i]} vs ${none.losses[i]}`,
      );
    }
    assertRelRms(full.grads0, none.grads0, `${arch}: step-0 gradients`);
    assertClose(full.params, none.params, `${arch}: parameters after 3 steps`);
    ok(full.peak < none.peak, `${arch}: peak ${full.peak} B with recompute, ${none.peak} B without`);
  });
}

gpuTest(
  'recompute selective (naive attention): same losses and gradients; the T×T probabilities are not kept',
  async (gpu) => {
    // T = 128: the (B, nh, T, T) probabilities outweigh the recomputation's own buffers.
    const none = await run(gpu, { attention: 'naive', blockSize: 128 });
    const sel = await run(gpu, { attention: 'naive', blockSize: 128, recompute: 'selective' });
    for (let i = 0; i < none.losses.length; i++) {
      ok(
        Math.abs(sel.losses[i] - none.losses[i]) <= 1e-5 * Math.abs(none.losses[i]),
      );
    }
    assertRelRms(sel.grads0, none.grads0, 'selective: step-0 gradients');
    assertClose(sel.params, none.params, 'selective: parameters after 3 steps');
    ok(sel.peak < none.peak, `selective: peak ${sel.peak} B, without ${none.peak} B`);
  },
);

// The recurrent cores (docs/design.md#activation-recomputation): Mamba's scan drops its chunk-entry states
// (B, D, ⌈T/32⌉, N), the linear attention its log-decays and (head decay) its chunk states. The
// backward holds one recomputed core at a time — its output (B, T, D) and states — so a Mamba
// stack saves at least (L − 1) layers' states less one output (its attention cores add to that in
// the hybrid): N = 64 here, where the states (N/32 of the output per layer) outweigh it at L = 3.
const SCAN_STATES = 4 * 64 * 1 * 64 * 4, SCAN_OUT = 4 * 32 * 64 * 4; // bytes: B = 4, D = 2·32, T = 32, N = 64
// The MoE models: the attention / scan cores are recomputed, the MoE sub-layer and its routing
// (which the load-balancing loss reads) are kept as they are.
const MOE = { nExpert: 4, moeTopK: 2, capacityFactor: 2, auxLossWeight: 0.01 } as const;
const RECURRENT: [string, Partial<TrainConfig>, number][] = [
  ['gpt-moe (naive attention)', { arch: 'gpt-moe', attention: 'naive', ...MOE }, 1],
  ['mamba-moe', { arch: 'mamba-moe', dState: 64, ...MOE }, 2 * SCAN_STATES - SCAN_OUT],
  ['mamba', { arch: 'mamba', dState: 64 }, 2 * SCAN_STATES - SCAN_OUT],
  ['linear (head decay)', { arch: 'linear' }, 1],
  ['linear (channel decay)', { arch: 'linear', linearDecay: 'channel' }, 1],
  ['hybrid', { arch: 'hybrid', dState: 64 }, 2 * SCAN_STATES - SCAN_OUT],
];
for (const [what, over, saved] of RECURRENT) {
  gpuTest(`recompute selective on ${what}: same losses (1e-5), gradients and parameters; lower peak`, async (gpu) => {
    const none = await run(gpu, over), sel = await run(gpu, { ...over, recompute: 'selective' });
    for (let i = 0; i < none.losses.length; i++) {
      ok(
        Math.abs(sel.losses[i] - none.losses[i]) <= 1e-5 * Math.abs(none.losses[i]),
        `${what} step ${i}: ${sel.losses[i]} vs ${none.losses[i]}`,
      );
    }
    assertGradsPerParam(sel.grads0, none.grads0, none.layout, `${what}: step-0 gradient`);
    assertClose(sel.params, none.params, `${what}: parameters after 3 steps`);
    ok(
      none.peak - sel.peak >= saved,
      `${what}: peak ${sel.peak} B with selective, ${none.peak} B without; expected at least ${saved} B less`,
    );
  });
}

Deno.test('recompute: refused where it is not built, naming the rule', () => {
  assertThrows(
    () => parseConfig({ arch: 'gpt-moe', recompute: 'full' }),
    'recompute full is not built for --arch gpt-moe',
  );
  assertThrows(
    () => parseConfig({ arch: 'mamba-moe', recompute: 'full' }),
    'recompute full is not built for --arch mamba-moe (its routing is read by the loss); use --recompute selective',
  );
  for (const arch of ['mamba', 'linear', 'hybrid', 'gpt-moe', 'mamba-moe']) {
    equal(parseConfig({ arch, recompute: 'selective' }).arch, arch);
  }
  assertThrows(() => parseConfig({ recompute: 'some' }), 'recompute');
});
