/**
 * Mixed precision of the linear layer (autograd/autocast.ts, docs/design.md#mixed-precision): under a tape's
 * autocast, y = x·wᵀ + b and its backward (dx = dy·w, dw = dyᵀ·x, db = Σ dy) match the f64
 * reference computed on the half precision operands (f32 accumulation: the f32 tolerances), and
 * the unrounded f64 reference within the half precision's tolerance; the operands really were
 * rounded (the f32 tolerance against the unrounded reference fails). bf16 runs everywhere; f16
 * where the adapter has shader-f16 (lavapipe), and is refused with a clear line elsewhere. Flash
 * attention under autocast reads the rounded qkv in both passes.
 */
import { equal, ok, throws } from 'node:assert/strict';
import { gpuTest, hasShaderF16 } from '../util/gpu.ts';
import { assertClose, assertRelRms, randn } from '../util/assert.ts';
import { Tape } from '../../src/autograd/tape.ts';
import { RULES } from '../../src/autograd/rules.ts';
import { flashAttention, linear } from '../../src/autograd/ops.ts';
import { attentionBackwardRef, attentionForwardRef } from '../../src/reference/attention.ts';
import { type Autocast, checkPrecision } from '../../src/autograd/autocast.ts';
import { matmulRef } from '../../src/reference/matmul.ts';
import { bf16RoundRef } from '../../src/reference/cast.ts';
import type { Gpu } from '../../src/gpu/context.ts';

const SHAPES = [[1, 1, 1], [7, 65, 33], [130, 17, 70]] as const;

/** The half precision values the kernels store, in f64. */
function rounded(mode: Autocast, v: Float64Array): Float64Array {
  return mode === 'f16' ? v.map((x) => Math.f16round(x)) : bf16RoundRef(Float64Array.from(v, Math.fround));
}

/**
 * Whether elementwise |a − ref| ≤ 1e-4 + 1e-3·|ref| (the f32 tolerance of docs/design.md#test-tolerances) holds
 * everywhere.
 */
function closeF32(a: ArrayLike<number>, ref: ArrayLike<number>): boolean {
  for (let i = 0; i < ref.length; i++) if (!(Math.abs(a[i] - ref[i]) <= 1e-4 + 1e-3 * Math.abs(ref[i]))) return false;
  return true;
}

async function checkLinear(gpu: Gpu, mode: Autocast): Promise<void> {
  for (const [n, cin, cout] of SHAPES) {
    const what = `${mode} linear ${n}×${cin}→${cout}`;
    const x = randn(n * cin, n + cin), w = randn(cout * cin, cout + 3), b = randn(cout, 5), dy = randn(n * cout, 9);
    const up = (v: Float64Array, shape: number[]) => gpu.upload(Float32Array.from(v), shape);
    const [X, W, B, DY] = [up(x, [n, cin]), up(w, [cout, cin]), up(b, [cout]), up(dy, [n, cout])];
    const tape = new Tape(gpu);
    tape.autocast = mode;
    for (const t of [X, W, B]) tape.requireGrad(t);
    const y = linear(tape, X, W, B);
    tape.seed(y, DY);
    tape.backward(RULES);
    const [gy, gx, gw, gb] = await Promise.all(
      [y, tape.gradOf(X)!, tape.gradOf(W)!, tape.gradOf(B)!].map((t) => gpu.read(t)),
    );
    tape.dispose();
    const [xr, wr, dyr] = [rounded(mode, x), rounded(mode, w), rounded(mode, dy)];
    const refs = (xs: Float64Array, ws: Float64Array, dys: Float64Array) => ({
      y: matmulRef(xs, ws, n, cout, cin, { transB: true }).map((v, i) => v + b[i % cout]),
      dx: matmulRef(dys, ws, n, cin, cout),
      dw: matmulRef(dys, xs, cout, cin, n, { transA: true }),
    });
    const half = refs(xr, wr, dyr), exact = refs(x, w, dy);
    const got = { y: gy, dx: gx, dw: gw };
    for (const k of ['y', 'dx', 'dw'] as const) {
      assertClose(got[k], half[k], `${what} ${k} vs the rounded operands`); // f32 accumulation of exactly those values
      if (mode === 'f16') assertClose(got[k], exact[k], `${what} ${k} vs f64`, 1e-2, 1e-2);
      else assertRelRms(got[k], exact[k], `${what} ${k} vs f64`, 1e-2);
      if (cin > 1) ok(!closeF32(got[k], exact[k]), `${what} ${k}: the operands were not rounded to ${mode}`);
    }
    const dbRef = Float64Array.from({ length: cout }, (_, j) => {
      let s = 0;
      for (let i = 0; i < n; i++) s += dy[i * cout + j];
      return s;
    });
    assertClose(gb, dbRef, `${what} db (f32 sum of the unrounded dy)`);
    for (const t of [X, W, B, DY]) t.release();
  }
}

gpuTest('autocast bf16: linear forward and backward on bf16-rounded operands, f32 accumulation', async (gpu) => {
  await checkLinear(gpu, 'bf16');
});

gpuTest(
  'autocast f16: linear forward and backward on f16 operands (or a clear refusal without shader-f16)',
  async (gpu) => {
    if (!hasShaderF16(gpu)) {
      throws(
        () => checkPrecision(gpu, 'f16-mixed'),
        /--precision f16-mixed: f16 tensors need the adapter's 'shader-f16'.*or bf16-mixed/,
      );
      checkPrecision(gpu, 'bf16-mixed'); // emulated: allowed everywhere
      return;
    }
    checkPrecision(gpu, 'f16-mixed');
    await checkLinear(gpu, 'f16');
  },
);

gpuTest('autocast: a weight read twice on a tape is cast once; a recomputation tape inherits the mode', (gpu) => {
  const x = gpu.upload(Float32Array.from(randn(12, 1)), [3, 4]), w = gpu.upload(Float32Array.from(randn(8, 2)), [2, 4]);
  const tape = new Tape(gpu, new Map(), false);
  tape.autocast = 'bf16';
  linear(tape, x, w, null);
  linear(tape, x, w, null);
  equal(tape.casts.size, 2, 'x and w cast once each');
  ok(tape.child(false).autocast === 'bf16', 'the child tape runs in the same precision');
  tape.dispose();
  equal(tape.casts.size, 0, 'dispose releases the casts');
});

gpuTest('autocast: flash attention reads the half precision qkv in forward and backward', async (gpu) => {
  const modes: Autocast[] = hasShaderF16(gpu) ? ['bf16', 'f16'] : ['bf16'];
  const d = { b: 2, t: 17, c: 12, nh: 3, causal: true };
  const n = d.b * d.t * 3 * d.c;
  const qkv = randn(n, 3, -2, 2), dy = randn(d.b * d.t * d.c, 4);
  for (const mode of modes) {
    const tape = new Tape(gpu);
    tape.autocast = mode;
    const X = gpu.upload(Float32Array.from(qkv), [d.b, d.t, 3 * d.c]),
      DY = gpu.upload(Float32Array.from(dy), [d.b, d.t, d.c]);
    tape.requireGrad(X);
    const y = flashAttention(tape, X, d);
    tape.seed(y, DY);
    tape.backward(RULES);
    const [gy, gx] = [await gpu.read(y), await gpu.read(tape.gradOf(X)!)];
    tape.dispose();
    const r = rounded(mode, qkv), ref = attentionForwardRef(r, d);
    assertClose(gy, ref.y, `${mode} flash y vs the rounded qkv`);
    assertClose(gx, attentionBackwardRef(r, ref.att, dy, d), `${mode} flash dqkv vs the rounded qkv`);
    ok(!closeF32(gy, attentionForwardRef(qkv, d).y), `${mode}: qkv was not rounded`);
    for (const t of [X, DY]) t.release();
  }
});
