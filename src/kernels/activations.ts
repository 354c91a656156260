/**
 * Elementwise primitives of the RWKV / Mamba / hybrid blocks (shaders/activations.wgsl):
 * SiLU, sigmoid, relu² (RWKV channel mix, BlinkDL/RWKV-LM), scaled logsigmoid (decay gates
 * g = logσ(x)/τ, fla-org/flash-linear-attention), softplus (Mamba's Δ), the product a∘b,
 * RWKV's token shift, lerp with a per-channel mix μ (RWKV time mix) and per-channel scaling.
 * Backward functions ACCUMULATE (+=) into their gradient buffers; a null gradient is skipped.
 * Per-channel gradients (dμ, ds) are column sums over rows without atomics: chunk partials
 * plus {@link columnSum}.
 */
import { f32bits, type Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { grid1d } from './grid.ts';
import { columnSum, ROWS_PER_CHUNK } from './reduce.ts';

type Entry =
  | 'silu_fwd'
  | 'silu_bwd'
  | 'sigmoid_fwd'
  | 'sigmoid_bwd'
  | 'relu2_fwd'
  | 'relu2_bwd'
  | 'logsigmoid_fwd'
  | 'logsigmoid_bwd'
  | 'softplus_fwd'
  | 'softplus_bwd'
  | 'mul_fwd'
  | 'mul_acc'
  | 'scale_fwd'
  | 'scale_acc'
  | 'lerp_fwd'
  | 'lerp_bwd_a'
  | 'shift_fwd'
  | 'shift_bwd'
  | 'colsum_mul'
  | 'colsum_mul_diff';

interface Extra {
  c?: number;
  alpha?: number;
  t?: number;
  chunk?: number;
  accumulate?: boolean;
}

/** One dispatch over `count` invocations; bindings a, b, c, out as in the shader. */
function run(
  gpu: Gpu,
  entry: Entry,
  [a, b, c]: (Tensor | undefined)[],
  out: Tensor,
  n: number,
  count: number,
  x: Extra = {},
): void {
  gpu.dispatch(
    { key: `activations.${entry}`, code: gpu.shaders.activations, entryPoint: entry },
    [a, b, c, out],
    new Uint32Array([n, x.c ?? 1, f32bits(x.alpha ?? 1), x.t ?? 1, x.chunk ?? 1, x.accumulate ? 1 : 0, 0, 0]),
    grid1d(count, 256),
  );
}

/** Throws unless every tensor holds as many elements as the first, naming the mismatch. */
function sameSize(fn: string, names: string[], ...ts: Tensor[]): void {
  for (let i = 1; i < ts.length; i++) {
    if (ts[i].size !== ts[0].size) {
      throw new Error(
        `${fn}: ${names[i]} [${ts[i].shape}] must have as many elements as ${names[0]} [${ts[0].shape}] (${
          ts[0].size
        })`,
      );
    }
  }
}

/** The row width C of a per-channel vector v (C) broadcast over x (N, C). */
function channels(fn: string, x: Tensor, v: Tensor, name: string): number {
  const c = v.size;
  if (c === 0 || x.size % c !== 0) {
    throw new Error(
      `${fn}: ${name} [${v.shape}] must be a per-channel vector (C) with C > 0 dividing x's ${x.size} elements [${x.shape}]`,
    );
  }
  return c;
}

/** out (C) += Σ_rows a∘b (entry colsum_mul) or a∘(b − c) (colsum_mul_diff), a, b, c (N, C). */
function columnProduct(gpu: Gpu, entry: 'colsum_mul' | 'colsum_mul_diff', ins: Tensor[], out: Tensor, c: number): void {
  const n = ins[0].size / c;
  if (n === 0) return;
  const chunks = Math.ceil(n / ROWS_PER_CHUNK);
  if (chunks === 1) {
    run(gpu, entry, ins, out, n, c, { c, chunk: n, accumulate: true });
    return;
  }
  const part = gpu.empty([chunks, c], 'f32', `${entry}.partials`);
  run(gpu, entry, ins, part, n, chunks * c, { c, chunk: ROWS_PER_CHUNK });
  columnSum(gpu, part, out, chunks, c);
  // Safe at once: later users of the pooled buffer are encoded after these dispatches.
  part.release();
}

function unary(fn: string, entry: Entry, x: Tensor, y: Tensor, gpu: Gpu, alpha?: number): void {
  sameSize(fn, ['x', 'y'], x, y);
  run(gpu, entry, [x], y, x.size, x.size, { alpha });
}

function unaryBackward(fn: string, entry: Entry, x: Tensor, dy: Tensor, dx: Tensor, gpu: Gpu, alpha?: number): void {
  sameSize(fn, ['x', 'dy', 'dx'], x, dy, dx);
  run(gpu, entry, [x, dy], dx, x.size, x.size, { alpha });
}

/** y = silu(x) = x·σ(x) (Elfwing et al., arXiv 1702.03118; Mamba's gate), any shape. @throws Error on size mismatch. */
export function siluForward(gpu: Gpu, x: Tensor, y: Tensor): void {
  unary('siluForward', 'silu_fwd', x, y, gpu);
}

/** dx += dy ∘ σ(x)(1 + x(1 − σ(x))), all the same size. @throws Error on size mismatch. */
export function siluBackward(gpu: Gpu, x: Tensor, dy: Tensor, dx: Tensor): void {
  unaryBackward('siluBackward', 'silu_bwd', x, dy, dx, gpu);
}

/** y = σ(x) = 1/(1 + e^{−x}), overflow-free for any x. @throws Error on size mismatch. */
export function sigmoidForward(gpu: Gpu, x: Tensor, y: Tensor): void {
  unary('sigmoidForward', 'sigmoid_fwd', x, y, gpu);
}

/** dx += dy ∘ σ(x)(1 − σ(x)). @throws Error on size mismatch. */
export function sigmoidBackward(gpu: Gpu, x: Tensor, dy: Tensor, dx: Tensor): void {
  unaryBackward('sigmoidBackward', 'sigmoid_bwd', x, dy, dx, gpu);
}

/** y = relu(x)² (RWKV channel mix, So et al. "Primer", arXiv 2109.08668). @throws Error on size mismatch. */
export function reluSquaredForward(gpu: Gpu, x: Tensor, y: Tensor): void {
  unary('reluSquaredForward', 'relu2_fwd', x, y, gpu);
}

/** dx += dy ∘ 2·relu(x). @throws Error on size mismatch. */
export function reluSquaredBackward(gpu: Gpu, x: Tensor, dy: Tensor, dx: Tensor): void {
  unaryBackward('reluSquaredBackward', 'relu2_bwd', x, dy, dx, gpu);
}

function finiteScale(fn: string, scale: number): void {
  if (!Number.isFinite(scale)) throw new Error(`${fn}: scale must be a finite number, got ${scale}`);
}

/**
 * y = scale·logσ(x) (≤ 0 for scale > 0): the log-decay gate g = logσ(x)/τ of GLA-style
 * linear attention (the kernel tests of docs/design.md#kernel-references-and-test-cases use τ = 0.1, scale = 10).
 * @throws Error on size mismatch or a non-finite scale.
 */
export function logSigmoidForward(gpu: Gpu, x: Tensor, y: Tensor, scale = 1): void {
  finiteScale('logSigmoidForward', scale);
  unary('logSigmoidForward', 'logsigmoid_fwd', x, y, gpu, scale);
}

/** dx += dy ∘ scale·σ(−x). @throws Error on size mismatch or a non-finite scale. */
export function logSigmoidBackward(gpu: Gpu, x: Tensor, dy: Tensor, dx: Tensor, scale = 1): void {
  finiteScale('logSigmoidBackward', scale);
  unaryBackward('logSigmoidBackward', 'logsigmoid_bwd', x, dy, dx, gpu, scale);
}

/** y = softplus(x) = log(1 + eˣ), overflow-free (Mamba's Δ). @throws Error on size mismatch. */
export function softplusForward(gpu: Gpu, x: Tensor, y: Tensor): void {
  unary('softplusForward', 'softplus_fwd', x, y, gpu);
}

/** dx += dy ∘ σ(x). @throws Error on size mismatch. */
export function softplusBackward(gpu: Gpu, x: Tensor, dy: Tensor, dx: Tensor): void {
  unaryBackward('softplusBackward', 'softplus_bwd', x, dy, dx, gpu);
}

/** y = a ∘ b, all the same size. @throws Error on size mismatch. */
export function mulForward(gpu: Gpu, a: Tensor, b: Tensor, y: Tensor): void {
  sameSize('mulForward', ['a', 'b', 'y'], a, b, y);
  run(gpu, 'mul_fwd', [a, b], y, y.size, y.size);
}

/**
 * da += dy ∘ b, db += dy ∘ a (one dispatch each, so da and db may be the same buffer).
 * @throws Error on size mismatch.
 */
export function mulBackward(gpu: Gpu, a: Tensor, b: Tensor, dy: Tensor, da: Tensor | null, db: Tensor | null): void {
  sameSize('mulBackward', ['a', 'b', 'dy'], a, b, dy);
  if (da) sameSize('mulBackward', ['a', 'da'], a, da);
  if (db) sameSize('mulBackward', ['b', 'db'], b, db);
  if (da) run(gpu, 'mul_acc', [dy, b], da, a.size, a.size);
  if (db) run(gpu, 'mul_acc', [dy, a], db, b.size, b.size);
}

/** The channel count of x (B, T, C) given B and T. */
function shiftDims(fn: string, x: Tensor, b: number, t: number): number {
  if (!Number.isInteger(b) || !Number.isInteger(t) || b < 1 || t < 1) {
    throw new Error(`${fn}: B and T must be positive integers, got B=${b}, T=${t}`);
  }
  const c = x.size / (b * t);
  if (!Number.isInteger(c) || c < 1) {
    throw new Error(`${fn}: x [${x.shape}] (${x.size} elements) is not (B=${b}, T=${t}, C) for a positive integer C`);
  }
  return c;
}

/**
 * RWKV's token shift (BlinkDL/RWKV-LM, `nn.ZeroPad2d((0, 0, 1, -1))`): y[b, t] = x[b, t − 1],
 * zero at t = 0 of every sequence.
 * @param x (B, T, C), @param y (B, T, C) output
 * @throws Error when B or T is not a positive integer or the sizes do not match (B, T, C).
 */
export function tokenShiftForward(gpu: Gpu, x: Tensor, y: Tensor, b: number, t: number): void {
  const c = shiftDims('tokenShiftForward', x, b, t);
  sameSize('tokenShiftForward', ['x', 'y'], x, y);
  run(gpu, 'shift_fwd', [x], y, x.size, x.size, { c, t });
}

/**
 * dx[b, t] += dy[b, t + 1] (nothing at t = T − 1), the transpose of {@link tokenShiftForward}.
 * @param dy (B, T, C), @param dx (B, T, C) +=
 * @throws Error as {@link tokenShiftForward}.
 */
export function tokenShiftBackward(gpu: Gpu, dy: Tensor, dx: Tensor, b: number, t: number): void {
  const c = shiftDims('tokenShiftBackward', dy, b, t);
  sameSize('tokenShiftBackward', ['dy', 'dx'], dy, dx);
  run(gpu, 'shift_bwd', [dy], dx, dy.size, dy.size, { c, t });
}

/**
 * RWKV time mix: y = a + μ ∘ (b − a) = a∘(1 − μ) + b∘μ, μ broadcast over rows.
 * @param a (N, C), @param b (N, C), @param mu (C), @param y (N, C) output
 * @throws Error on size mismatch or when μ's length does not divide a.
 */
export function lerpForward(gpu: Gpu, a: Tensor, b: Tensor, mu: Tensor, y: Tensor): void {
  sameSize('lerpForward', ['a', 'b', 'y'], a, b, y);
  const c = channels('lerpForward', a, mu, 'mu');
  run(gpu, 'lerp_fwd', [a, b, mu], y, y.size, y.size, { c });
}

/**
 * da += dy∘(1 − μ), db += dy∘μ, dμ += Σ_rows dy∘(b − a).
 * @param a (N, C), @param b (N, C), @param mu (C), @param dy (N, C)
 * @param da (N, C) +=, @param db (N, C) +=, @param dmu (C) += (each null: skipped)
 * @throws Error on size mismatch.
 */
export function lerpBackward(
  gpu: Gpu,
  a: Tensor,
  b: Tensor,
  mu: Tensor,
  dy: Tensor,
  da: Tensor | null,
  db: Tensor | null,
  dmu: Tensor | null,
): void {
  sameSize('lerpBackward', ['a', 'b', 'dy'], a, b, dy);
  const c = channels('lerpBackward', a, mu, 'mu');
  if (da) sameSize('lerpBackward', ['a', 'da'], a, da);
  if (db) sameSize('lerpBackward', ['b', 'db'], b, db);
  if (dmu) sameSize('lerpBackward', ['mu', 'dmu'], mu, dmu);
  if (da) run(gpu, 'lerp_bwd_a', [dy, mu], da, a.size, a.size, { c });
  if (db) run(gpu, 'scale_acc', [dy, mu], db, b.size, b.size, { c });
  if (dmu) columnProduct(gpu, 'colsum_mul_diff', [dy, b, a], dmu, c);
}

/**
 * y = x ∘ s with a per-channel s broadcast over rows (gates, skip scales such as Mamba's D).
 * @param x (N, C), @param s (C), @param y (N, C) output
 * @throws Error on size mismatch or when s's length does not divide x.
 */
export function scaleChannelsForward(gpu: Gpu, x: Tensor, s: Tensor, y: Tensor): void {
  sameSize('scaleChannelsForward', ['x', 'y'], x, y);
  const c = channels('scaleChannelsForward', x, s, 's');
  run(gpu, 'scale_fwd', [x, s], y, y.size, y.size, { c });
}

/**
 * dx += dy∘s, ds += Σ_rows dy∘x.
 * @param x (N, C), @param s (C), @param dy (N, C), @param dx (N, C) +=, @param ds (C) += (each null: skipped)
 * @throws Error on size mismatch.
 */
export function scaleChannelsBackward(
  gpu: Gpu,
  x: Tensor,
  s: Tensor,
  dy: Tensor,
  dx: Tensor | null,
  ds: Tensor | null,
): void {
  sameSize('scaleChannelsBackward', ['x', 'dy'], x, dy);
  const c = channels('scaleChannelsBackward', x, s, 's');
  if (dx) sameSize('scaleChannelsBackward', ['x', 'dx'], x, dx);
  if (ds) sameSize('scaleChannelsBackward', ['s', 'ds'], s, ds);
  if (dx) run(gpu, 'scale_acc', [dy, s], dx, x.size, x.size, { c });
  if (ds) columnProduct(gpu, 'colsum_mul', [dy, x], ds, c);
}
