/**
 * Block-wise int8 quantisation (shaders/compress_int8.wgsl): one f32 scale per block of B
 * values, s = absmax / 127, q = round(127·x / absmax) ties to even, four q per u32 word;
 * y = q·s, so |x − y| ≤ s/2 per element (plus f32 rounding). The absmax scaling of
 * 8-bit optimizers (Dettmers et al., arXiv 2110.02861) applied to a message.
 */
import type { Gpu } from '../../gpu/context.ts';
import type { Tensor } from '../../gpu/tensor.ts';
import { specialise } from '../shaders.ts';
import { grid1d } from '../grid.ts';
import { checkQuantBlock, QUANT_BLOCKS } from './blocks.ts';
import { checkCount, checkParts, checkTensor, type Compressed, type Compressor } from './compressor.ts';

/** The block sizes allowed: {@link QUANT_BLOCKS}, shared with int4. */
export const INT8_BLOCKS = QUANT_BLOCKS;

/** @throws Error naming the allowed block sizes unless `block` is one of them. */
export function checkInt8Block(block: number): void {
  checkQuantBlock('int8', block);
}

function kernel(gpu: Gpu, entry: 'quantize' | 'dequantize', block: number) {
  return {
    key: `compress.int8.${entry}.${block}`,
    code: specialise(gpu.shaders.compress_int8, { BLOCK: `${block}u` }),
    entryPoint: entry,
  };
}

/**
 * q (⌈n/4⌉ u32: bytes of two's-complement int8, element 4w + j in byte j) and scales (⌈n/B⌉ f32)
 * of x (n, f32). One workgroup per block.
 * @throws Error on a bad block size, wrong dtypes or sizes.
 */
export function quantizeInt8(gpu: Gpu, x: Tensor, q: Tensor, scales: Tensor, block: number): void {
  checkInt8Block(block);
  const n = x.size;
  checkTensor('quantizeInt8', 'x', x, 'f32', n);
  checkTensor('quantizeInt8', 'q', q, 'u32', Math.ceil(n / 4));
  checkTensor('quantizeInt8', 'scales', scales, 'f32', Math.ceil(n / block));
  if (n === 0) return;
  const g = grid1d(Math.ceil(n / block) * 256, 256);
  gpu.dispatch(kernel(gpu, 'quantize', block), [x, q, scales, undefined], new Uint32Array([n, g[0]]), g);
}

/**
 * y (n, f32) = q·scale of the block of each element: the inverse of {@link quantizeInt8}.
 * @throws Error on a bad block size, wrong dtypes or sizes.
 */
export function dequantizeInt8(gpu: Gpu, q: Tensor, scales: Tensor, y: Tensor, block: number): void {
  checkInt8Block(block);
  const n = y.size;
  checkTensor('dequantizeInt8', 'y', y, 'f32', n);
  checkTensor('dequantizeInt8', 'q', q, 'u32', Math.ceil(n / 4));
  checkTensor('dequantizeInt8', 'scales', scales, 'f32', Math.ceil(n / block));
  if (n === 0) return;
  const g = grid1d(n, 256);
  gpu.dispatch(kernel(gpu, 'dequantize', block), [undefined, q, scales, y], new Uint32Array([n, g[0]]), g);
}

/**
 * The int8 compressor with blocks of `block` values: parts [q u32 (⌈n/4⌉), scales f32 (⌈n/B⌉)];
 * wire bytes 4·⌈n/4⌉ + 4·⌈n/B⌉ (about n + 4n/B).
 * @throws Error unless block is one of {@link INT8_BLOCKS}.
 */
export function int8Compressor(block = 256): Compressor {
  checkInt8Block(block);
  const parts = (fn: string, c: Compressed, n: number) => {
    if (c.n !== n) throw new Error(`${fn}: message of ${c.n} values, tensor has ${n}`);
    checkParts(fn, c, [['q', 'u32', Math.ceil(n / 4)], ['scales', 'f32', Math.ceil(n / block)]]);
  };
  return {
    name: `int8:${block}`,
    allocate(gpu: Gpu, n: number): Compressed {
      checkCount('int8.allocate', n);
      return {
        n,
        parts: [
          gpu.empty([Math.ceil(n / 4)], 'u32', 'int8.q'),
          gpu.empty([Math.ceil(n / block)], 'f32', 'int8.scales'),
        ],
      };
    },
    compress(gpu: Gpu, x: Tensor, c: Compressed): void {
      parts('int8.compress', c, x.size);
      quantizeInt8(gpu, x, c.parts[0], c.parts[1], block);
    },
    decompress(gpu: Gpu, c: Compressed, y: Tensor): void {
      parts('int8.decompress', c, y.size);
      dequantizeInt8(gpu, c.parts[0], c.parts[1], y, block);
    },
    wireBytes: (n: number) => 4 * Math.ceil(n / 4) + 4 * Math.ceil(n / block),
  };
}
