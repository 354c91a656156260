/**
 * The RWKV / Mamba primitives composed through the tape: every rule's gradient, fan-out
 * accumulation and rules with some inputs not needing gradients, against central finite
 * differences of the same graph in f64.
 */
import { gpuTest } from '../util/gpu.ts';
import { assertClose, assertRelRms, assertThrows, randn, rng } from '../util/assert.ts';
import { Tape } from '../../src/autograd/tape.ts';
import { RULES } from '../../src/autograd/rules.ts';
import * as ops from '../../src/autograd/ops.ts';
import * as R from '../../src/reference/activations.ts';
import { rmsNormRef } from '../../src/reference/rmsnorm.ts';
import { crossEntropyRef } from '../../src/reference/cross_entropy.ts';
import type { Tensor } from '../../src/gpu/tensor.ts';

const B = 2, T = 5, C = 7, N = B * T;
const GATE_SCALE = 0.5;
const FILL = 0.5;
type Inputs = { x: Float64Array; w: Float64Array; mu: Float64Array; s: Float64Array };
const NAMES = ['x', 'w', 'mu', 's'] as const;

/**
 * The graph, in f64:
 *   m = lerp(tokenShift(x), x, μ);  z = rmsNorm(m, w) ∘ silu(x);  q = scaleChannels(z, s)
 *   logits = σ(q) ∘ relu(q)² + GATE_SCALE·logσ(q);  loss = mean cross-entropy(logits, targets)
 * x reaches the loss three ways (through the shift into lerp's a, as lerp's b, through silu) and q
 * three ways (σ, relu², logσ), so gradients must add up on the tape.
 */
function lossRef(p: Inputs, targets: Int32Array): number {
  const m = R.lerpRef(R.tokenShiftRef(p.x, B, T, C), p.x, p.mu);
  const z = R.mulRef(rmsNormRef(m, p.w, N, C).y, R.siluRef(p.x));
  const q = R.scaleChannelsRef(z, p.s);
  const l1 = R.logSigmoidRef(q, GATE_SCALE);
  const logits = R.mulRef(R.sigmoidRef(q), R.reluSquaredRef(q)).map((v, i) => v + l1[i]);
  return crossEntropyRef(logits, targets, N, C).loss;
}

/** Every coordinate of ∂loss/∂p[name] by central differences (f64: error ~h²·f‴ ≈ 1e-10). */
function fdGrad(p: Inputs, targets: Int32Array, name: keyof Inputs, h = 1e-5): Float64Array {
  const v = p[name];
  return v.map((keep, i) => {
    v[i] = keep + h;
    const up = lossRef(p, targets);
    v[i] = keep - h;
    const down = lossRef(p, targets);
    v[i] = keep;
    return (up - down) / (2 * h);
  });
}

function inputs(seed: number): Inputs {
  return {
    x: randn(N * C, seed, -2, 2),
    w: randn(C, seed + 1, 0.5, 1.5),
    mu: randn(C, seed + 2, 0, 1),
    s: randn(C, seed + 3, 0.5, 2),
  };
}

function targetsOf(seed: number): Int32Array {
  const r = rng(seed);
  return Int32Array.from({ length: N }, () => Math.floor(r() * C));
}

/** The same graph through the tape's ops. */
function forward(tape: Tape, t: Record<keyof Inputs, Tensor>, targets: Tensor): Tensor {
  const m = ops.lerp(tape, ops.tokenShift(tape, t.x, B, T), t.x, t.mu);
  const z = ops.mul(tape, ops.rmsNorm(tape, m, t.w), ops.silu(tape, t.x));
  const q = ops.scaleChannels(tape, z, t.s);
  const logits = ops.add(
    tape,
    ops.mul(tape, ops.sigmoid(tape, q), ops.reluSquared(tape, q)),
    ops.logSigmoid(tape, q, GATE_SCALE),
  );
  return ops.crossEntropy(tape, logits, targets);
}

/** Runs forward and backward with gradients for `want` only; returns the loss and those gradients. */
async function onGpu(gpu: Tape['gpu'], p: Inputs, targets: Int32Array, want: readonly (keyof Inputs)[]) {
  const t = {
    x: gpu.upload(Float32Array.from(p.x), [B, T, C]),
    w: gpu.upload(Float32Array.from(p.w), [C]),
    mu: gpu.upload(Float32Array.from(p.mu), [C]),
    s: gpu.upload(Float32Array.from(p.s), [C]),
  };
  // Gradients start at FILL, as under gradient accumulation: every kernel must add, not overwrite.
  const grads = new Map(want.map((k) => [k, gpu.upload(new Float32Array(t[k].size).fill(FILL), t[k].shape)]));
  const tTgt = gpu.upload(targets, [N], 'i32');
  const tape = new Tape(gpu, new Map(want.map((k) => [t[k], grads.get(k)!])));
  const loss = forward(tape, t, tTgt);
  tape.backward(RULES);
  const l = (await gpu.read(loss))[0];
  const out = new Map<keyof Inputs, Float32Array>();
  for (const [k, g] of grads) out.set(k, (await gpu.read(g)).map((v) => v - FILL) as Float32Array);
  tape.dispose();
  for (const x of [...Object.values(t), ...grads.values(), tTgt]) x.release();
  return { loss: l, grads: out };
}

for (const seed of [1, 2]) {
  gpuTest(
    `composed primitives: tape gradients match finite differences of the f64 graph (seed ${seed})`,
    async (gpu) => {
      const p = inputs(seed * 10), targets = targetsOf(seed);
      const { loss, grads } = await onGpu(gpu, p, targets, NAMES);
      assertClose([loss], [lossRef(p, targets)], 'loss');
      for (const k of NAMES) assertRelRms(grads.get(k)!, fdGrad(p, targets, k), `d${k}`);
    },
  );
}

gpuTest('composed primitives: gradients for parameters only (x a constant input)', async (gpu) => {
  // x needs no gradient: tokenShift and silu are not recorded and lerp, rmsNorm, mul get
  // null for some of their inputs' gradient buffers.
  const p = inputs(30), targets = targetsOf(3);
  const want = ['w', 'mu', 's'] as const;
  const { grads } = await onGpu(gpu, p, targets, want);
  for (const k of want) assertRelRms(grads.get(k)!, fdGrad(p, targets, k), `d${k}`);
});

gpuTest('primitive ops reject mismatched shapes', async (gpu) => {
  const tape = new Tape(gpu);
  const x = gpu.empty([2, 3, 4]), v4 = gpu.empty([4]), v5 = gpu.empty([5]), y = gpu.empty([23]);
  try {
    assertThrows(() => ops.rmsNorm(tape, x, v5), 'rmsnorm: x [2,3,4] is not (N, C) for the gain w [5]');
    assertThrows(() => ops.mul(tape, x, y, 'gate'), 'gate: [2,3,4] ∘ [23] needs equal sizes');
    assertThrows(() => ops.tokenShift(tape, x, 5, 3), 'shift: x [2,3,4] is not (B=5, T=3, C)');
    assertThrows(() => ops.lerp(tape, x, x, v5), 'lerp: a [2,3,4], b [2,3,4] must be equal-sized (N, C) for μ [5]');
    assertThrows(() => ops.scaleChannels(tape, x, v5), 'scale: x [2,3,4] is not (N, C) for s [5]');
    assertThrows(() => ops.logSigmoid(tape, x, NaN), 'scale must be a finite number');
    // Well-formed calls on (B, T, C) inputs give (N, C) outputs.
    assertClose(ops.rmsNorm(tape, x, v4).shape, [6, 4], 'rmsNorm shape');
    assertClose(ops.tokenShift(tape, x, 2, 3).shape, [2, 3, 4], 'tokenShift shape');
  } finally {
    tape.dispose();
    for (const t of [x, v4, v5, y]) t.release();
  }
  await gpu.sync();
});
