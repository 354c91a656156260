/**
 * The backward split into B and W (src/autograd/split.ts, docs/design.md#split-backward-b-and-w):
 * for every rule with a parameter input, B alone gives the activations' gradients of the fused
 * backward and leaves every parameter gradient untouched; W then adds the parameters' gradients
 * of the fused backward (relative RMS < 1e-6); what B keeps for W is counted and freed by W.
 * Out-of-order calls are refused by name.
 */
import { equal, ok, throws } from 'node:assert/strict';
import { gpuTest } from '../util/gpu.ts';
import { assertRelRms } from '../util/assert.ts';
import { Tape } from '../../src/autograd/tape.ts';
import { RULES } from '../../src/autograd/rules.ts';
import { linear } from '../../src/autograd/ops.ts';
import type { Tensor } from '../../src/gpu/tensor.ts';
import type { Gpu } from '../../src/gpu/context.ts';
import { RULE_CASES, type RuleCase, upload } from './split_cases.ts';

const read = async (gpu: Gpu, t: Tensor) => (await gpu.read(t) as Float32Array).slice();

/** One forward of the case, then the fused backward or B then W; the gradients read back. */
async function run(gpu: Gpu, c: RuleCase, split: boolean) {
  const acts = c.acts.map((s, i) => upload(gpu, s, 10 + i));
  const params = c.params.map((s, i) => upload(gpu, s, 20 + i, c.range?.(i)));
  const grads = params.map((p) => gpu.zeros(p.shape));
  const tape = new Tape(gpu, new Map(params.map((p, i) => [p, grads[i]])));
  acts.forEach((a) => tape.requireGrad(a));
  const y = await c.build(tape, acts, params);
  const dy = upload(gpu, y.shape, 30);
  tape.seed(y, dy);
  let afterB: Float32Array[] = [], held = 0;
  if (split) {
    if (tape.asynchronous) await tape.backwardInputAsync(RULES);
    else tape.backwardInput(RULES);
    afterB = await Promise.all(grads.map((g) => read(gpu, g)));
    held = tape.heldForWeights();
  } else await tape.backwardAsync(RULES);
  // The activations' gradients are read before W runs: B alone must complete them.
  const dActs = await Promise.all(acts.map((a) => read(gpu, tape.gradOf(a)!)));
  if (split) tape.backwardWeights();
  const dParams = await Promise.all(grads.map((g) => read(gpu, g)));
  const heldAfter = tape.heldForWeights();
  tape.dispose();
  [...acts, ...params, ...grads, dy].forEach((t) => t.release());
  return { dActs, dParams, afterB, held, heldAfter };
}

for (const c of RULE_CASES) {
  gpuTest(`B then W on ${c.name}: the fused backward's gradients (rel RMS < 1e-6)`, async (gpu) => {
    const fused = await run(gpu, c, false), split = await run(gpu, c, true);
    fused.dActs.forEach((d, i) => assertRelRms(split.dActs[i], d, `${c.name}: activation ${i} after B`, 1e-6));
    fused.dParams.forEach((d, i) => {
      ok(d.some((v) => v !== 0), `${c.name}: parameter ${i} has a gradient in the fused backward`);
      ok(split.afterB[i].every((v) => v === 0), `${c.name}: parameter ${i}'s gradient is W's, untouched by B`);
      assertRelRms(split.dParams[i], d, `${c.name}: parameter ${i} after W`, 1e-6);
    });
    ok(split.held > 0, `${c.name}: B keeps something for W (${split.held} bytes)`);
    equal(split.heldAfter, 0, `${c.name}: W frees what B kept`);
  });
}

gpuTest('a linear layer keeps dY and X for W: their bytes, exactly', async (gpu) => {
  const x = upload(gpu, [7, 5], 1), w = upload(gpu, [3, 5], 2), dw = gpu.zeros([3, 5]);
  const tape = new Tape(gpu, new Map([[w, dw]]));
  tape.requireGrad(x);
  const y = linear(tape, x, w, null);
  const dy = upload(gpu, y.shape, 3);
  tape.seed(y, dy);
  equal(tape.heldForWeights(), 0);
  tape.backwardInput(RULES);
  equal(tape.heldForWeights(), (7 * 3 + 7 * 5) * 4, 'dY (7, 3) and X (7, 5) in f32');
  tape.backwardWeights();
  equal(tape.heldForWeights(), 0);
  tape.dispose();
  [x, w, dw, dy].forEach((t) => t.release());
  await gpu.sync();
});

gpuTest('B and W out of order are refused, naming what was wrong', async (gpu) => {
  const x = upload(gpu, [7, 5], 1), w = upload(gpu, [3, 5], 2), dw = gpu.zeros([3, 5]);
  const tape = new Tape(gpu, new Map([[w, dw]]));
  tape.requireGrad(x);
  tape.seed(linear(tape, x, w, null), upload(gpu, [7, 3], 3));
  throws(() => tape.backwardWeights(), /backwardWeights\(\): phase B has not run on this tape/);
  tape.backwardInput(RULES);
  throws(() => tape.backwardInput(RULES), /backwardInput\(\): phase B already ran on this tape/);
  throws(() => tape.backward(RULES), /backward\(\): this tape ran phase B; finish it with backwardWeights\(\)/);
  await tape.backwardInputAsync(RULES).then(
    () => ok(false, 'a second B (async) must be refused'),
    (e: Error) => ok(/backwardInputAsync\(\): phase B already ran/.test(e.message), e.message),
  );
  tape.backwardWeights();
  throws(() => tape.backwardWeights(), /backwardWeights\(\): phase W already ran on this tape/);
  tape.dispose();
  [x, w, dw].forEach((t) => t.release());
  await gpu.sync();
});
