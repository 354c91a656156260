/**
 * Block-wise int4 quantisation (shaders/compress_int4.wgsl): one f32 scale per block of B
 * values, s = absmax / 7, q = round(7·x / absmax) ties to even in [−7, 7], eight 4-bit
 * two's-complement q per u32 word; y = q·s, so |x − y| ≤ s/2 per element (plus f32 rounding).
 * The 4-bit outer gradients of Streaming DiLoCo (Douillard et al., arXiv 2501.18512), laid out
 * as int8.ts lays out its bytes, with the same block sizes (blocks.ts QUANT_BLOCKS).
 */
import type { Gpu } from '../../gpu/context.ts';
import type { Tensor } from '../../gpu/tensor.ts';
import { specialise } from '../shaders.ts';
import { grid1d } from '../grid.ts';
import { checkQuantBlock } from './blocks.ts';
import { checkCount, checkParts, checkTensor, type Compressed, type Compressor } from './compressor.ts';

function kernel(gpu: Gpu, entry: 'quantize' | 'dequantize', block: number) {
  return {
    key: `compress.int4.${entry}.${block}`,
    code: specialise(gpu.shaders.compress_int4, { BLOCK: `${block}u` }),
    entryPoint: entry,
  };
}

/**
 * q (⌈n/8⌉ u32: nibbles of two's-complement int4, element 8w + j in nibble j) and scales
 * (⌈n/B⌉ f32) of x (n, f32). One workgroup per block.
 * @throws Error on a block size outside blocks.ts QUANT_BLOCKS, wrong dtypes or sizes.
 */
export function quantizeInt4(gpu: Gpu, x: Tensor, q: Tensor, scales: Tensor, block: number): void {
  checkQuantBlock('int4', block);
  const n = x.size;
  checkTensor('quantizeInt4', 'x', x, 'f32', n);
  checkTensor('quantizeInt4', 'q', q, 'u32', Math.ceil(n / 8));
  checkTensor('quantizeInt4', 'scales', scales, 'f32', Math.ceil(n / block));
  if (n === 0) return;
  const g = grid1d(Math.ceil(n / block) * 256, 256);
  gpu.dispatch(kernel(gpu, 'quantize', block), [x, q, scales, undefined], new Uint32Array([n, g[0]]), g);
}

/**
 * y (n, f32) = q·scale of the block of each element: the inverse of {@link quantizeInt4}.
 * @throws Error on a block size outside blocks.ts QUANT_BLOCKS, wrong dtypes or sizes.
 */
export function dequantizeInt4(gpu: Gpu, q: Tensor, scales: Tensor, y: Tensor, block: number): void {
  checkQuantBlock('int4', block);
  const n = y.size;
  checkTensor('dequantizeInt4', 'y', y, 'f32', n);
  checkTensor('dequantizeInt4', 'q', q, 'u32', Math.ceil(n / 8));
  checkTensor('dequantizeInt4', 'scales', scales, 'f32', Math.ceil(n / block));
  if (n === 0) return;
  const g = grid1d(n, 256);
  gpu.dispatch(kernel(gpu, 'dequantize', block), [undefined, q, scales, y], new Uint32Array([n, g[0]]), g);
}

/**
 * The int4 compressor with blocks of `block` values: parts [q u32 (⌈n/8⌉), scales f32 (⌈n/B⌉)];
 * wire bytes 4·⌈n/8⌉ + 4·⌈n/B⌉ (about n/2 + 4n/B).
 * @throws Error unless block is one of blocks.ts QUANT_BLOCKS.
 */
export function int4Compressor(block = 256): Compressor {
  checkQuantBlock('int4', block);
  const parts = (fn: string, c: Compressed, n: number) => {
    if (c.n !== n) throw new Error(`${fn}: message of ${c.n} values, tensor has ${n}`);
    checkParts(fn, c, [['q', 'u32', Math.ceil(n / 8)], ['scales', 'f32', Math.ceil(n / block)]]);
  };
  return {
    name: `int4:${block}`,
    allocate(gpu: Gpu, n: number): Compressed {
      checkCount('int4.allocate', n);
      return {
        n,
        parts: [
          gpu.empty([Math.ceil(n / 8)], 'u32', 'int4.q'),
          gpu.empty([Math.ceil(n / block)], 'f32', 'int4.scales'),
        ],
      };
    },
    compress(gpu: Gpu, x: Tensor, c: Compressed): void {
      parts('int4.compress', c, x.size);
      quantizeInt4(gpu, x, c.parts[0], c.parts[1], block);
    },
    decompress(gpu: Gpu, c: Compressed, y: Tensor): void {
      parts('int4.decompress', c, y.size);
      dequantizeInt4(gpu, c.parts[0], c.parts[1], y, block);
    },
    wireBytes: (n: number) => 4 * Math.ceil(n / 8) + 4 * Math.ceil(n / block),
  };
}
