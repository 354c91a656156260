/**
 * 1-bit sign compression (shaders/compress_sign.wgsl) as 1-bit Adam's compressed allreduce
 * (Tang et al., arXiv 2102.02888) implements it in DeepSpeed: bits = [x ≥ 0] (0 counts as +),
 * 32 per u32 word, and one f32 scale per tensor, s = ‖x‖₂ / √n, so D(c) = ±s has x's norm.
 * (EF-SGD, Karimireddy et al., scales by ‖x‖₁ / n instead.) Meant for {@link ErrorFeedback}:
 * alone it is biased.
 */
import type { Gpu } from '../../gpu/context.ts';
import type { Tensor } from '../../gpu/tensor.ts';
import { gradNorm } from '../adamw.ts';
import { grid1d } from '../grid.ts';
import { checkCount, checkParts, checkTensor, type Compressed, type Compressor } from './compressor.ts';

function dispatch(gpu: Gpu, entry: string, bindings: (Tensor | undefined)[], threads: number, n: number): void {
  const g = grid1d(threads, 256);
  gpu.dispatch(
    { key: `compress.${entry}`, code: gpu.shaders.compress_sign, entryPoint: entry },
    bindings,
    new Uint32Array([n, g[0]]),
    g,
  );
}

/**
 * bits (⌈n/32⌉ u32, element 32w + j in bit j) and scale (1, f32) of x (n ≥ 1, f32). Three
 * dispatches: ‖x‖₂ by gradNorm's two, then the packing.
 * @throws Error on wrong dtypes or sizes, or n = 0 (no scale is defined).
 */
export function signCompress(gpu: Gpu, x: Tensor, bits: Tensor, scale: Tensor): void {
  const n = x.size;
  checkCount('signCompress', n);
  checkTensor('signCompress', 'x', x, 'f32', n);
  checkTensor('signCompress', 'bits', bits, 'u32', Math.ceil(n / 32));
  checkTensor('signCompress', 'scale', scale, 'f32', 1);
  const norm = gpu.empty([2], 'f32', 'sign.norm');
  gradNorm(gpu, x, norm, 0);
  dispatch(gpu, 'pack_sign', [x, norm, bits, scale, undefined], Math.ceil(n / 32), n);
  norm.release();
}

/**
 * y (n, f32) = scale where the bit is 1, −scale where it is 0.
 * @throws Error on wrong dtypes or sizes.
 */
export function signDecompress(gpu: Gpu, bits: Tensor, scale: Tensor, y: Tensor): void {
  const n = y.size;
  checkCount('signDecompress', n);
  checkTensor('signDecompress', 'y', y, 'f32', n);
  checkTensor('signDecompress', 'bits', bits, 'u32', Math.ceil(n / 32));
  checkTensor('signDecompress', 'scale', scale, 'f32', 1);
  dispatch(gpu, 'unpack_sign', [undefined, undefined, bits, scale, y], n, n);
}

/** The sign compressor: parts [bits u32 (⌈n/32⌉), scale f32 (1)]; wire bytes 4·⌈n/32⌉ + 4. */
export const signCompressor: Compressor = {
  name: 'sign',
  allocate(gpu: Gpu, n: number): Compressed {
    checkCount('sign.allocate', n);
    return { n, parts: [gpu.empty([Math.ceil(n / 32)], 'u32', 'sign.bits'), gpu.empty([1], 'f32', 'sign.scale')] };
  },
  compress(gpu: Gpu, x: Tensor, c: Compressed): void {
    checkParts('sign.compress', c, [['bits', 'u32', Math.ceil(x.size / 32)], ['scale', 'f32', 1]]);
    if (c.n !== x.size) throw new Error(`sign.compress: message of ${c.n} values, x has ${x.size}`);
    signCompress(gpu, x, c.parts[0], c.parts[1]);
  },
  decompress(gpu: Gpu, c: Compressed, y: Tensor): void {
    if (c.n !== y.size) throw new Error(`sign.decompress: message of ${c.n} values, y has ${y.size}`);
    signDecompress(gpu, c.parts[0], c.parts[1], y);
  },
  wireBytes: (n: number) => 4 * Math.ceil(n / 32) + 4,
};
