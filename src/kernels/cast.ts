/**
 * f32 ↔ f16 casts (shaders/cast.wgsl) for mixed precision (Micikevicius et al., arXiv 1710.03740):
 * f16 copies of f32 values for the matmuls' operands, f32 values back. Round to nearest even;
 * past f16's range (±65 504) a value becomes ±inf.
 */
import type { Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { grid1d } from './grid.ts';

/**
 * Throws unless the device can run f16 kernels.
 * @throws Error naming the kernel and the missing feature.
 */
export function requireF16(gpu: Gpu, what: string): void {
  if (!gpu.features.has('shader-f16')) {
    throw new Error(
      `${what}: f16 tensors need the adapter's 'shader-f16' feature, which ${
        gpu.adapterDescription || 'this adapter'
      } (${gpu.backend}) lacks; use f32`,
    );
  }
}

function cast(gpu: Gpu, entry: 'to_f16' | 'to_f32', x: Tensor, y: Tensor, from: string, to: string): void {
  if (x.dtype !== from || y.dtype !== to) {
    throw new Error(`cast ${entry}: expects ${from} → ${to}, got ${x.dtype} [${x.shape}] → ${y.dtype} [${y.shape}]`);
  }
  if (x.size !== y.size) throw new Error(`cast ${entry}: sizes differ: [${x.shape}] vs [${y.shape}]`);
  requireF16(gpu, `cast ${entry}`);
  if (x.size === 0) return;
  const g = grid1d(x.size, 256);
  gpu.dispatch(
    { key: `cast.${entry}`, code: gpu.shaders.cast, entryPoint: entry },
    entry === 'to_f16' ? [x, y, undefined, undefined] : [undefined, undefined, x, y],
    new Uint32Array([x.size, g[0]]),
    g,
  );
}

/**
 * y (f16) = x (f32), elementwise, any shape (equal sizes).
 * @throws Error for other dtypes, different sizes, or a device without shader-f16.
 */
export function castToF16(gpu: Gpu, x: Tensor, y: Tensor): void {
  cast(gpu, 'to_f16', x, y, 'f32', 'f16');
}

/**
 * y (f32) = x (f16), elementwise, any shape (equal sizes).
 * @throws Error for other dtypes, different sizes, or a device without shader-f16.
 */
export function castToF32(gpu: Gpu, x: Tensor, y: Tensor): void {
  cast(gpu, 'to_f32', x, y, 'f16', 'f32');
}

/**
 * y = x rounded to bfloat16 (ties to even) and kept in f32 storage (shaders/round_bf16.wgsl):
 * the bf16-mixed precision's operands, emulated on any adapter. x and y: f32 of equal sizes,
 * any shape; y may be x itself (in place).
 * @throws Error for other dtypes or different sizes.
 */
export function roundToBf16(gpu: Gpu, x: Tensor, y: Tensor): void {
  if (x.dtype !== 'f32' || y.dtype !== 'f32') {
    throw new Error(`roundToBf16: expects f32 → f32, got ${x.dtype} [${x.shape}] → ${y.dtype} [${y.shape}]`);
  }
  if (x.size !== y.size) throw new Error(`roundToBf16: sizes differ: [${x.shape}] vs [${y.shape}]`);
  if (x.size === 0) return;
  const g = grid1d(x.size, 256);
  const inPlace = x.buffer === y.buffer && x.offset === y.offset;
  // One buffer bound read-only and writable in one dispatch is refused: in place reads a copy.
  const src = inPlace ? gpu.empty(x.shape, 'f32', `${x.label}.copy`) : x;
  if (inPlace) gpu.copy(x, src);
  gpu.dispatch(
    { key: 'cast.round_bf16', code: gpu.shaders.round_bf16, entryPoint: 'round_bf16' },
    [src, y],
    new Uint32Array([x.size, g[0]]),
    g,
  );
  if (inPlace) src.release();
}
