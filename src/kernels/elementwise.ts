/**
 * Elementwise kernels: residual add, bias add, scaled accumulate and GELU forward/backward.
 * Backward kernels accumulate (`+=`) into their output, so fan-out gradients sum for free.
 */
import { f32bits, type Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { grid1d } from './grid.ts';

type Entry = 'add' | 'add_bias' | 'add_bias_inplace' | 'axpy' | 'gelu_fwd' | 'gelu_bwd';

function run(
  gpu: Gpu,
  entry: Entry,
  a: Tensor | undefined,
  b: Tensor | undefined,
  out: Tensor,
  c = 1,
  alpha = 1,
): void {
  const n = out.size;
  gpu.dispatch(
    { key: `elementwise.${entry}`, code: gpu.shaders.elementwise, entryPoint: entry },
    [a, b, out],
    new Uint32Array([n, c, f32bits(alpha), 0]),
    grid1d(n, 256),
  );
}

function sameSize(what: string, ...ts: Tensor[]): void {
  for (const t of ts) {
    if (t.size !== ts[0].size) throw new Error(`${what}: sizes differ: ${ts.map((x) => `[${x.shape}]`).join(' vs ')}`);
  }
}

/** out = a + b, any shape (all equal size). */
export function add(gpu: Gpu, a: Tensor, b: Tensor, out: Tensor): void {
  sameSize('add', a, b, out);
  run(gpu, 'add', a, b, out);
}

/** out = x + bias, x (N, C), bias (C). */
export function addBias(gpu: Gpu, x: Tensor, bias: Tensor, out: Tensor): void {
  sameSize('addBias', x, out);
  const c = bias.size;
  if (x.size % c !== 0) throw new Error(`addBias: bias of ${c} does not divide x [${x.shape}]`);
  run(gpu, 'add_bias', x, bias, out, c);
}

/** x += bias in place, x (N, C), bias (C). */
export function addBiasInPlace(gpu: Gpu, x: Tensor, bias: Tensor): void {
  const c = bias.size;
  if (x.size % c !== 0) throw new Error(`addBiasInPlace: bias of ${c} does not divide x [${x.shape}]`);
  run(gpu, 'add_bias_inplace', undefined, bias, x, c);
}

/** out += alpha · x (same size). */
export function axpy(gpu: Gpu, alpha: number, x: Tensor, out: Tensor): void {
  sameSize('axpy', x, out);
  run(gpu, 'axpy', x, undefined, out, 1, alpha);
}

/** out = GELU(x), tanh approximation as in GPT-2 (Hendrycks & Gimpel, arXiv 1606.08415). */
export function geluForward(gpu: Gpu, x: Tensor, out: Tensor): void {
  sameSize('geluForward', x, out);
  run(gpu, 'gelu_fwd', x, undefined, out);
}

/** dx += dy ∘ GELU′(x). */
export function geluBackward(gpu: Gpu, x: Tensor, dy: Tensor, dx: Tensor): void {
  sameSize('geluBackward', x, dy, dx);
  run(gpu, 'gelu_bwd', x, dy, dx);
}
