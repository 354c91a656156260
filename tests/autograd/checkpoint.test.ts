/**
 * The recomputed segment (src/autograd/checkpoint.ts) with several inputs: the gradients of every
 * input (one used again outside the segment, one a parameter, one wanting none) and of the
 * parameters equal the plain tape's; a segment reading an activation it was not handed, or
 * returning its own input, is refused by name.
 */
import { equal, rejects } from 'node:assert/strict';
import { gpuTest } from '../util/gpu.ts';
import { assertClose, randn } from '../util/assert.ts';
import { Tape } from '../../src/autograd/tape.ts';
import { RULES } from '../../src/autograd/rules.ts';
import { checkpoint } from '../../src/autograd/checkpoint.ts';
import { add, linear, mul } from '../../src/autograd/ops.ts';
import type { Tensor } from '../../src/gpu/tensor.ts';
import type { Gpu } from '../../src/gpu/context.ts';

const N = 8, C = 4;

/** The segment: linear(((a ∘ b) + a) ∘ c, w) (N, C); c is a constant, w a parameter. */
function segment(tape: Tape, [a, b, w, c]: readonly Tensor[]): Tensor {
  const s = add(tape, mul(tape, a, b, 'ab'), a, 's'); // (N, C)
  return linear(tape, mul(tape, s, c, 'sc'), w, null, 'seg'); // (N, C)
}

/** out = segment(a, b, w, c) + a, seeded with a fixed gradient; returns out and the gradients of a, b, w. */
async function run(gpu: Gpu, recompute: boolean) {
  const up = (seed: number, shape: number[]) => gpu.upload(Float32Array.from(randn(shape[0] * shape[1], seed)), shape);
  const [a, b, c, w, dout] = [up(1, [N, C]), up(2, [N, C]), up(3, [N, C]), up(4, [C, C]), up(5, [N, C])];
  const dw = gpu.zeros([C, C]), tape = new Tape(gpu, new Map([[w, dw]]));
  tape.requireGrad(a);
  tape.requireGrad(b);
  const xs = [a, b, w, c];
  const y = recompute
    ? await checkpoint(tape, xs, (t, x) => Promise.resolve(segment(t, x)), 'seg', () => RULES)
    : segment(tape, xs);
  const out = add(tape, y, a, 'out');
  tape.seed(out, dout);
  equal(tape.asynchronous, recompute);
  await tape.backwardAsync(RULES);
  const read = async (t: Tensor) => (await gpu.read(t) as Float32Array).slice();
  const res = {
    out: await read(out),
    da: await read(tape.gradOf(a)!),
    db: await read(tape.gradOf(b)!),
    dw: await read(dw),
  };
  tape.dispose();
  [a, b, c, w, dout, dw].forEach((t) => t.release());
  return res;
}

gpuTest('checkpoint with several inputs: output and every gradient equal the plain tape', async (gpu) => {
  const plain = await run(gpu, false), seg = await run(gpu, true);
  for (const k of ['out', 'da', 'db', 'dw'] as const) assertClose(seg[k], plain[k], `checkpoint: ${k}`, 1e-6, 1e-6);
});

gpuTest(
  'checkpoint refuses a segment that reads an activation it was not handed, or returns its input',
  async (gpu) => {
    const a = gpu.upload(new Float32Array(N * C).fill(1), [N, C], 'f32', 'a');
    const b = gpu.upload(new Float32Array(N * C).fill(2), [N, C], 'f32', 'b');
    const tape = new Tape(gpu);
    tape.requireGrad(a);
    tape.requireGrad(b);
    // a's gradient would be lost: the recomputed tape knows only b.
    await rejects(
      checkpoint(tape, [b], (t, [x]) => Promise.resolve(mul(t, a, x, 'ax')), 'stray', () => RULES),
      /checkpoint stray: the segment reads 'a', an activation that is not among its inputs/,
    );
    await rejects(
      checkpoint(tape, [a, b], (_t, [x]) => Promise.resolve(x), 'identity', () => RULES),
      /checkpoint identity: the segment returns its input 'a'/,
    );
    tape.dispose();
    [a, b].forEach((t) => t.release());
  },
);
