/**
 * Cast compressors: fp16 (f16 storage, 2 bytes an element; needs `shader-f16`) and bf16
 * (rounded by kernels/cast.ts roundToBf16, then the upper 16 bits packed two per u32 word by
 * shaders/compress_bf16.wgsl, so the bf16 payload really is 2 bytes an element on any adapter).
 * Neither needs a residual, though {@link ErrorFeedback} accepts them.
 */
import type { Gpu } from '../../gpu/context.ts';
import type { Tensor } from '../../gpu/tensor.ts';
import { castToF16, castToF32, requireF16, roundToBf16 } from '../cast.ts';
import { grid1d } from '../grid.ts';
import { checkCount, checkParts, checkTensor, type Compressed, type Compressor } from './compressor.ts';

/** 2·n rounded up to whole 4-byte words: the wire bytes of both casts. */
function halfBytes(n: number): number {
  return 4 * Math.ceil(n / 2);
}

/**
 * fp16 compressor: parts [payload f16 (n)], round to nearest even, ±inf past ±65 504.
 * @throws Error (from requireF16) on an adapter without 'shader-f16', at allocate and compress.
 */
export const fp16Compressor: Compressor = {
  name: 'fp16',
  allocate(gpu: Gpu, n: number): Compressed {
    checkCount('fp16.allocate', n);
    requireF16(gpu, 'fp16 compressor');
    return { n, parts: [gpu.empty([n], 'f16', 'fp16.payload')] };
  },
  compress(gpu: Gpu, x: Tensor, c: Compressed): void {
    checkParts('fp16.compress', c, [['payload', 'f16', x.size]]);
    castToF16(gpu, x, c.parts[0]);
  },
  decompress(gpu: Gpu, c: Compressed, y: Tensor): void {
    checkParts('fp16.decompress', c, [['payload', 'f16', y.size]]);
    castToF32(gpu, c.parts[0], y);
  },
  wireBytes: halfBytes,
};

/**
 * payload (⌈n/2⌉ u32) = the upper halves of x's f32 bits, two per word (element 2w low, 2w + 1
 * high). Exact only for values already rounded to bf16: the lower halves are dropped.
 * @throws Error when x is not f32 or payload does not hold ⌈n/2⌉ u32.
 */
export function packBf16(gpu: Gpu, x: Tensor, payload: Tensor): void {
  checkTensor('packBf16', 'x', x, 'f32', x.size);
  checkTensor('packBf16', 'payload', payload, 'u32', Math.ceil(x.size / 2));
  bf16Dispatch(gpu, 'pack_bf16', x, payload, undefined, Math.ceil(x.size / 2), x.size);
}

/**
 * y (n, f32) = the bf16 values of payload (⌈n/2⌉ u32), exactly.
 * @throws Error when y is not f32 or payload does not hold ⌈n/2⌉ u32.
 */
export function unpackBf16(gpu: Gpu, payload: Tensor, y: Tensor): void {
  checkTensor('unpackBf16', 'y', y, 'f32', y.size);
  checkTensor('unpackBf16', 'payload', payload, 'u32', Math.ceil(y.size / 2));
  bf16Dispatch(gpu, 'unpack_bf16', undefined, payload, y, y.size, y.size);
}

function bf16Dispatch(
  gpu: Gpu,
  entry: string,
  x: Tensor | undefined,
  payload: Tensor,
  y: Tensor | undefined,
  threads: number,
  n: number,
): void {
  if (n === 0) return;
  const g = grid1d(threads, 256);
  gpu.dispatch(
    { key: `compress.${entry}`, code: gpu.shaders.compress_bf16, entryPoint: entry },
    [x, payload, y],
    new Uint32Array([n, g[0]]),
    g,
  );
}

/** bf16 compressor: parts [payload u32 (⌈n/2⌉)], round to nearest even (roundToBf16). */
export const bf16Compressor: Compressor = {
  name: 'bf16',
  allocate(gpu: Gpu, n: number): Compressed {
    checkCount('bf16.allocate', n);
    return { n, parts: [gpu.empty([Math.ceil(n / 2)], 'u32', 'bf16.payload')] };
  },
  compress(gpu: Gpu, x: Tensor, c: Compressed): void {
    checkParts('bf16.compress', c, [['payload', 'u32', Math.ceil(x.size / 2)]]);
    if (c.n !== x.size) throw new Error(`bf16.compress: message of ${c.n} values, x has ${x.size}`);
    const rounded = gpu.empty([x.size], 'f32', 'bf16.rounded');
    roundToBf16(gpu, x, rounded);
    packBf16(gpu, rounded, c.parts[0]);
    rounded.release();
  },
  decompress(gpu: Gpu, c: Compressed, y: Tensor): void {
    if (c.n !== y.size) throw new Error(`bf16.decompress: message of ${c.n} values, y has ${y.size}`);
    unpackBf16(gpu, c.parts[0], y);
  },
  wireBytes: halfBytes,
};
