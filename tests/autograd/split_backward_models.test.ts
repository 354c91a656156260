/**
 * The B / W split (src/autograd/split.ts) on whole models: one forward of each architecture
 * (tiny configs), then B then W, gives the fused backward's parameter gradients (relative RMS
 * < 1e-6 each); a pipeline stage's input (the residual stream entering its blocks) has its whole
 * gradient after B alone. Every op of these models that reads a parameter has a per-rule case
 * (split_cases.ts), so no rule escapes the per-rule test.
 */
import { ok } from 'node:assert/strict';
import { gpuTest } from '../util/gpu.ts';
import { assertRelRms } from '../util/assert.ts';
import { parseConfig, type TrainConfig } from '../../src/train/config.ts';
import { createModel } from '../../src/models/registry.ts';
import { LOCAL, type ModelContext } from '../../src/models/context.ts';
import type { MoECall, MoEContext, MoELanguageModel } from '../../src/models/moe_layer.ts';
import type { LayeredModel } from '../../src/models/model.ts';
import { Tape } from '../../src/autograd/tape.ts';
import { RULES } from '../../src/autograd/rules.ts';
import { Tensor } from '../../src/gpu/tensor.ts';
import type { Gpu } from '../../src/gpu/context.ts';
import { RULE_CASES, upload } from './split_cases.ts';

const B = 2, T = 8, V = 13;
const host = Int32Array.from({ length: B * T }, (_, i) => (i * 5 + 1) % V);
const hostTargets = Int32Array.from({ length: B * T }, (_, i) => (i * 3 + 2) % V);

type Mode = 'fused' | 'split';

/** Backward of `tape` by the fused rules or by B; returns the callback that finishes it (W or nothing). */
async function backward(tape: Tape, mode: Mode): Promise<() => void> {
  if (mode === 'fused') {
    await tape.backwardAsync(RULES);
    return () => {};
  }
  await tape.backwardInputAsync(RULES);
  ok(tape.heldForWeights() > 0, 'B keeps tensors for W');
  return () => tape.backwardWeights();
}

/** Step-0 parameter gradients by name, the stage input's gradient after B, and the ops that read a parameter. */
async function run(gpu: Gpu, over: Partial<TrainConfig>, mode: Mode) {
  const cfg = parseConfig({ nLayer: 2, nHead: 2, nEmbd: 16, blockSize: T, batchSize: B, dState: 4, ...over });
  const model = createModel(gpu, cfg, V) as LayeredModel;
  const tokens = gpu.upload(host, [B, T], 'i32'), targets = gpu.upload(hostTargets, [B * T], 'i32');
  const withParams = new Set<string>();
  // Whole model: parameter gradients.
  const tape = new Tape(gpu, model.params.gradMap());
  tape.observer = (node) => {
    if (Object.values(node).some((v) => v instanceof Tensor && tape.isParameter(v))) withParams.add(node.op);
    if (node.op === 'checkpoint') withParams.add(node.op);
  };
  const { loss } = await model.forward(tape, tokens, host, targets, B, T, { recompute: cfg.recompute });
  ok(loss, 'the forward returns a loss');
  const finish = await backward(tape, mode);
  finish();
  const grads = (await gpu.read(model.params.grads) as Float32Array).slice();
  const byName = Object.fromEntries(model.params.params.map((p) => [p.name, grads.slice(p.offset, p.offset + p.size)]));
  tape.dispose();
  // A stage over every block and the head: its input's gradient is complete after B.
  gpu.clear(model.params.grads);
  const stage = new Tape(gpu, model.params.gradMap()), x0 = upload(gpu, [B * T, cfg.nEmbd], 7);
  stage.requireGrad(x0);
  // gpt-moe's blocks compute their MoE MLPs through the context, on this device.
  const layers = (model as Partial<MoELanguageModel>).moeLayers;
  const ctx: ModelContext = layers
    ? { ...LOCAL, moe: (call: MoECall) => layers.local(stage, call) } as MoEContext
    : LOCAL;
  let x = x0;
  for (let i = 0; i < model.nLayer; i++) x = await model.block(ctx, stage, x, i, B, T);
  const input = { hostTokens: host, tokens, targets, hostTargets };
  await model.head(ctx, stage, x, input, { recompute: cfg.recompute });
  const finishStage = await backward(stage, mode);
  const dx0 = (await gpu.read(stage.gradOf(x0)!) as Float32Array).slice();
  finishStage();
  stage.dispose();
  [tokens, targets, x0].forEach((t) => t.release());
  model.params.destroy();
  return { byName, dx0, withParams };
}

const ARCHS: [string, Partial<TrainConfig>][] = [
  ['gpt', { arch: 'gpt' }],
  ['gpt, recompute full', { arch: 'gpt', recompute: 'full' }],
  ['mamba', { arch: 'mamba' }],
  ['linear', { arch: 'linear' }],
  ['hybrid', { arch: 'hybrid', attnEvery: 2 }],
  ['gpt-moe', { arch: 'gpt-moe' }],
];

for (const [name, over] of ARCHS) {
  gpuTest(
    `B then W on ${name}: every parameter gradient of the fused backward; the stage input's after B`,
    async (gpu) => {
      const fused = await run(gpu, over, 'fused'), split = await run(gpu, over, 'split');
      for (const [p, g] of Object.entries(fused.byName)) {
        assertRelRms(split.byName[p], g, `${name}: ${p}`, 1e-6);
      }
      ok(fused.dx0.some((v) => v !== 0), `${name}: the stage input has a gradient`);
      assertRelRms(split.dx0, fused.dx0, `${name}: stage input gradient after B alone`, 1e-6);
      const covered = new Set<string>(RULE_CASES.map((c) => c.op));
      for (const op of fused.withParams) {
        ok(covered.has(op), `${name}: op '${op}' reads a parameter but has no per-rule case`);
      }
    },
  );
}
