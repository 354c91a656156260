/** A typed, shaped view of a GPU buffer region. Row-major, contiguous. */
import type { Gpu } from './context.ts';

/**
 * Element types the kernels use: f32 for values, i32 for token ids and targets, f16 for the
 * half-precision copies of mixed precision (kernels need the device feature shader-f16).
 */
export type DType = 'f32' | 'i32' | 'u32' | 'f16';

/** Host arrays matching each dtype. */
export type HostArray = Float32Array | Int32Array | Uint32Array | Float16Array;

/** Bytes per element of each dtype. */
export const DTYPE_BYTES: Record<DType, number> = { f32: 4, i32: 4, u32: 4, f16: 2 };

/** Bytes a buffer or binding needs for `n` elements of `dtype`: WebGPU sizes bindings in 4-byte words. */
export function storageBytes(n: number, dtype: DType): number {
  return Math.ceil((n * DTYPE_BYTES[dtype]) / 4) * 4;
}

/** A host array of `dtype` over `data` (an ArrayBuffer is viewed, numbers are converted). */
export function hostArray(dtype: DType, data: ArrayBuffer | readonly number[]): HostArray {
  // Float16Array is only touched for f16, so runtimes without it still run everything else.
  const of = dtype === 'f32'
    ? Float32Array
    : dtype === 'i32'
    ? Int32Array
    : dtype === 'u32'
    ? Uint32Array
    : Float16Array;
  return new of(data as ArrayBuffer);
}

let nextId = 1;

/**
 * A GPU tensor: `shape` elements of its dtype (4 bytes, 2 for f16) at `offset` bytes into `buffer`.
 * Tensors from the pool are released explicitly ({@link Tensor.release}); views and
 * parameter slices are never released on their own.
 */
export class Tensor {
  readonly id = nextId++;
  readonly size: number;
  private released = false;

  constructor(
    readonly gpu: Gpu,
    readonly buffer: GPUBuffer,
    readonly shape: readonly number[],
    readonly dtype: DType = 'f32',
    /** Byte offset into `buffer`; a multiple of the device's minStorageBufferOffsetAlignment. */
    readonly offset = 0,
    private readonly pooled = true,
    /** Free-form name shown in errors (e.g. a parameter's name). */
    public label = '',
  ) {
    this.size = shape.reduce((a, b) => a * b, 1);
    for (const d of shape) {
      if (!Number.isInteger(d) || d < 0) {
        throw new Error(`Tensor shape must hold non-negative integers, got [${shape}]`);
      }
    }
  }

  /** Size in bytes (4 per element, 2 for f16). */
  get bytes(): number {
    return this.size * DTYPE_BYTES[this.dtype];
  }

  /** Bytes a binding or copy of the tensor spans: {@link bytes} in whole 4-byte words. */
  get wordBytes(): number {
    return storageBytes(this.size, this.dtype);
  }

  /** The binding for a bind group entry. @throws Error when the tensor was released. */
  binding(): GPUBufferBinding {
    if (this.released) throw new Error(`Tensor ${this.label || this.id} [${this.shape}] used after release`);
    return { buffer: this.buffer, offset: this.offset, size: Math.max(4, this.wordBytes) };
  }

  /** The same memory with another shape of equal size. The view is not released on its own. */
  view(shape: readonly number[]): Tensor {
    const n = shape.reduce((a, b) => a * b, 1);
    if (n !== this.size) throw new Error(`Cannot view [${this.shape}] (${this.size} elements) as [${shape}] (${n})`);
    return new Tensor(this.gpu, this.buffer, shape, this.dtype, this.offset, false, this.label);
  }

  /**
   * A non-pooled view of elements [first, first + n) of a 4-byte dtype. Its byte offset may miss
   * the storage-binding alignment: copy, read or write it, and bind it only where first·4 is aligned.
   * @throws Error when the range leaves the tensor or the dtype is f16.
   */
  range(first: number, n: number, label = this.label): Tensor {
    if (this.dtype === 'f16' || first < 0 || n < 0 || first + n > this.size) {
      throw new Error(`range: elements [${first}, ${first + n}) of ${this.dtype} [${this.shape}] (4-byte dtypes only)`);
    }
    return new Tensor(this.gpu, this.buffer, [n], this.dtype, this.offset + first * 4, false, label);
  }

  /** Hands the buffer back to the pool (no-op for views and slices). Idempotent. */
  release(): void {
    if (this.released || !this.pooled) return;
    this.released = true;
    this.gpu.pool.release(this.buffer);
  }

  get isReleased(): boolean {
    return this.released;
  }
}
