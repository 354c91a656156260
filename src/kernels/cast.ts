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
