/**
 * One small tape per rule whose op takes a parameter, for the B / W split tests
 * (split_backward.test.ts): ragged shapes, every activation input wanting a gradient.
 */
import { Tape } from '../../src/autograd/tape.ts';
import { RULES } from '../../src/autograd/rules.ts';
import { checkpoint } from '../../src/autograd/checkpoint.ts';
import { embedding, layerNorm, linear, mul, rmsNorm } from '../../src/autograd/ops.ts';
import { lerp, logSigmoid, scaleChannels } from '../../src/autograd/activation_ops.ts';
import { conv1d, recurrentLinearAttention, selectiveScan } from '../../src/autograd/mixer_ops.ts';
import { expertLinear } from '../../src/autograd/moe_ops.ts';
import type { OpName } from '../../src/autograd/records.ts';
import type { Tensor } from '../../src/gpu/tensor.ts';
import type { Gpu } from '../../src/gpu/context.ts';
import { randn } from '../util/assert.ts';

export interface RuleCase {
  op: OpName;
  name: string;
  /** Activation shapes (gradient wanted) and parameter shapes, each with an optional value range. */
  acts: (readonly number[])[];
  params: (readonly number[])[];
  range?: (param: number) => [number, number];
  /** Builds the op on the tape; resolves to the output seeded with a random gradient. */
  build(t: Tape, a: Tensor[], p: Tensor[]): Tensor | Promise<Tensor>;
}

const N = 7, C = 5, B = 2, T = 7;

/** Every rule with a parameter input, with and without its optional parameters. */
export const RULE_CASES: readonly RuleCase[] = [
  {
    op: 'linear',
    name: 'linear with bias',
    acts: [[N, C]],
    params: [[3, C], [3]],
    build: (t, [x], [w, b]) => linear(t, x, w, b),
  },
  {
    op: 'linear',
    name: 'linear without bias',
    acts: [[N, C]],
    params: [[3, C]],
    build: (t, [x], [w]) => linear(t, x, w, null),
  },
  {
    op: 'layerNorm',
    name: 'layerNorm',
    acts: [[N, C]],
    params: [[C], [C]],
    build: (t, [x], [w, b]) => layerNorm(t, x, w, b),
  },
  { op: 'rmsNorm', name: 'rmsNorm', acts: [[N, C]], params: [[C]], build: (t, [x], [w]) => rmsNorm(t, x, w) },
  {
    op: 'embedding',
    name: 'embedding (no activation input)',
    acts: [],
    params: [[11, C], [T, C]],
    build(t, _a, [wte, wpe]) {
      const host = Int32Array.from({ length: B * T }, (_, i) => (i * 7 + 3) % 11);
      const tokens = t.gpu.upload(host, [B, T], 'i32');
      t.onDispose(() => tokens.release());
      return embedding(t, tokens, host, wte, wpe, B, T);
    },
  },
  {
    op: 'moeExpertLinear',
    name: 'moeExpertLinear (2 experts, biased)',
    acts: [[2 * 16, 12]],
    params: [[20, 12], [20, 12], [20], [20]],
    build: (t, [x], [w0, w1, b0, b1]) => expertLinear(t, x, [w0, w1], [b0, b1], 16),
  },
  {
    op: 'conv1d',
    name: 'conv1d',
    acts: [[B, T, C]],
    params: [[C, 4], [C]],
    build: (t, [x], [w, b]) => conv1d(t, x, w, b, { b: B, t: T, d: C, k: 4 }),
  },
  {
    op: 'selectiveScan',
    name: 'selectiveScan (A, D, bias)',
    acts: [[B, T, C], [B, T, C], [B, T, 3], [B, T, 3], [B, T, C]],
    params: [[C, 3], [C], [C]],
    range: (i) => (i === 0 ? [-1, -0.1] : [-1, 1]),
    build: (t, [u, dt, bm, cm, z], [a, d, bias]) =>
      selectiveScan(t, u, dt, a, bm, cm, d, bias, z, { b: B, t: T, d: C, n: 3 }),
  },
  {
    op: 'recurrentLinearAttention',
    name: 'recurrentLinearAttention (bonus u)',
    acts: [[B, T, 6], [B, T, 6], [B, T, 8], [B, T, 6]],
    params: [[6]],
    build(t, [q, k, v, w], [u]) {
      const dims = { b: B, t: T, h: 2, dk: 3, dv: 4, scale: 1 / Math.sqrt(3) };
      // The kernel reads a log-decay (≤ 0): −0.5·w², w times itself times a constant.
      const neg = t.gpu.upload(new Float32Array(w.size).fill(-0.5), w.shape);
      t.onDispose(() => neg.release());
      return recurrentLinearAttention(t, q, k, v, mul(t, mul(t, w, w), neg), u, dims);
    },
  },
  {
    op: 'lerp',
    name: 'lerp (μ)',
    acts: [[N, C], [N, C]],
    params: [[C]],
    build: (t, [a, b], [mu]) => lerp(t, a, b, mu),
  },
  {
    op: 'scaleChannels',
    name: 'scaleChannels (s)',
    acts: [[N, C]],
    params: [[C]],
    build: (t, [x], [s]) => scaleChannels(t, x, s),
  },
  {
    op: 'logSigmoid',
    name: 'logSigmoid of a parameter',
    acts: [],
    params: [[N, C]],
    build: (t, _a, [w]) => logSigmoid(t, w, 0.5),
  },
  { op: 'mul', name: 'mul by a parameter', acts: [[N, C]], params: [[N, C]], build: (t, [x], [w]) => mul(t, x, w) },
  {
    op: 'checkpoint',
    name: 'checkpoint (a parameter among its inputs, one read directly)',
    acts: [[N, C]],
    params: [[C, C], [C]],
    build: (t, [x], [w, g]) =>
      checkpoint(t, [x, w], (s, [a, ww]) => Promise.resolve(rmsNorm(s, linear(s, a, ww, null), g)), 'seg', () => RULES),
  },
];

/** Uploads n values in [lo, hi) from a fixed seed. */
export function upload(gpu: Gpu, shape: readonly number[], seed: number, [lo, hi] = [-1, 1]): Tensor {
  const n = shape.reduce((a, b) => a * b, 1);
  return gpu.upload(Float32Array.from(randn(n, seed, lo, hi)), shape, 'f32', `in${seed}`);
}
