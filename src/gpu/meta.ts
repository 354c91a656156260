/**
 * A GPU context without a device, for accounting (docs/design.md#accounting-derived-from-the-model):
 * tensors and buffers are shapes and dtypes only, every allocation is recorded, and dispatches,
 * writes, clears and copies do nothing, so the real model code runs over it to count what a
 * rank holds. PyTorch's meta device (torch.device('meta')) and FakeTensor play the same part.
 * Reading a tensor back has no values to return: it throws unless the context was made with
 * `reads: 'zeros'`.
 */
import { Gpu } from './context.ts';
import type { KernelCode } from './context.ts';
import type { OpenedDevice } from './device.ts';
import type { HostArray, Tensor } from './tensor.ts';
import { hostArray } from './tensor.ts';
import type { ShaderName } from './shaders.ts';
import type { KernelTime } from './profiler.ts';

/** What a meta context was asked to allocate, in bytes (buffers of the pool and of parameter stores alike). */
export interface MetaAllocations {
  /** Buffers created. */
  count: number;
  /** Bytes of every buffer created. */
  createdBytes: number;
  /** Bytes of the buffers not destroyed. */
  liveBytes: number;
  /** Largest `liveBytes` seen. */
  peakBytes: number;
}

/** Options of {@link MetaGpu}. */
export interface MetaOptions {
  /** What a read returns: an error naming the tensor (default), or zeros of its size. */
  reads?: 'throw' | 'zeros';
  /** Device features to claim (default shader-f16, so mixed precision builds as on a GPU that has it). */
  features?: string[];
  /**
   * The WGSL sources (shaders.ts loadShaders), for kernels that specialise their text before dispatching (a
   * forward and backward); absent, every source is empty, which building a model never reads.
   */
  shaders?: Record<ShaderName, string>;
}

/** Limits of a device with no bounds: a meta model may be any size. */
const NO_LIMITS = {
  maxBufferSize: Number.MAX_SAFE_INTEGER,
  maxStorageBufferBindingSize: Number.MAX_SAFE_INTEGER,
  maxComputeWorkgroupsPerDimension: Number.MAX_SAFE_INTEGER,
  maxComputeWorkgroupStorageSize: 32768,
  maxComputeInvocationsPerWorkgroup: 1024,
  maxComputeWorkgroupSizeX: 1024,
  maxComputeWorkgroupSizeY: 1024,
  maxComputeWorkgroupSizeZ: 64,
  maxStorageBuffersPerShaderStage: 16,
  minStorageBufferOffsetAlignment: 256,
  minUniformBufferOffsetAlignment: 256,
};

/** The stand-in GPUDevice: buffers are records of their size, nothing is ever encoded. */
function metaDevice(alloc: MetaAllocations): GPUDevice {
  const createBuffer = (d: GPUBufferDescriptor) => {
    alloc.count++;
    alloc.createdBytes += d.size;
    alloc.liveBytes += d.size;
    alloc.peakBytes = Math.max(alloc.peakBytes, alloc.liveBytes);
    let destroyed = false;
    return {
      size: d.size,
      usage: d.usage,
      label: d.label ?? '',
      mapState: 'unmapped',
      destroy() {
        if (destroyed) return;
        destroyed = true;
        alloc.liveBytes -= d.size;
      },
      getMappedRange: () => new ArrayBuffer(d.size),
      unmap() {},
    } as unknown as GPUBuffer;
  };
  const device = {
    limits: NO_LIMITS,
    features: new Set<string>(),
    lost: new Promise<never>(() => {}),
    queue: { onSubmittedWorkDone: () => Promise.resolve(), submit() {}, writeBuffer() {} },
    createBuffer,
    addEventListener() {},
    destroy() {},
  };
  return device as unknown as GPUDevice;
}

/** Shader text is never compiled on a meta context: every name reads as an empty source. */
const NO_SHADERS = new Proxy({}, { get: () => '' }) as Record<ShaderName, string>;

/** A {@link Gpu} with no device (see the module doc). */
export class MetaGpu extends Gpu {
  /** Every buffer this context created (see {@link MetaAllocations}). */
  readonly allocations: MetaAllocations;
  private readonly reads: 'throw' | 'zeros';

  constructor(o: MetaOptions = {}) {
    const allocations: MetaAllocations = { count: 0, createdBytes: 0, liveBytes: 0, peakBytes: 0 };
    const opened: OpenedDevice = {
      device: metaDevice(allocations),
      adapterInfo: { vendor: 'meta', architecture: 'meta', device: 'meta', description: 'meta (no device)' },
      backend: 'wgpu',
      features: o.features ?? ['shader-f16'],
      isCpu: false,
      softwareDriver: null,
      close() {},
    };
    super(opened, o.shaders ?? NO_SHADERS, false);
    this.allocations = allocations;
    this.reads = o.reads ?? 'throw';
  }

  override get isMeta(): boolean {
    return true;
  }

  /** @throws Error when the data length differs from the tensor's size (as a device's write). */
  override write(t: Tensor, data: HostArray | readonly number[]): void {
    if (data.length !== t.size) throw new Error(`write: ${data.length} values for tensor [${t.shape}] of ${t.size}`);
  }

  override clear(_t: Tensor): void {}

  /** @throws Error when the sizes differ (as a device's copy). */
  override copy(src: Tensor, dst: Tensor): void {
    if (src.size !== dst.size) throw new Error(`copy: sizes differ ([${src.shape}] vs [${dst.shape}])`);
  }

  /** Zeros of the tensor's size with `reads: 'zeros'`. @throws Error otherwise: a meta tensor has no values. */
  override read(t: Tensor): Promise<HostArray> {
    if (this.reads === 'zeros') {
      return Promise.resolve(hostArray(t.dtype, new ArrayBuffer(Math.max(4, t.wordBytes))).subarray(0, t.size));
    }
    return Promise.reject(
      new Error(
        `read: tensor ${
          t.label || t.id
        } [${t.shape}] is on a meta GPU (shapes only, no values); make the MetaGpu with reads: 'zeros' to read zeros`,
      ),
    );
  }

  override sync(): Promise<void> {
    return Promise.resolve();
  }

  /** Counts the dispatch; nothing runs. */
  override dispatch(_k: KernelCode, _b: unknown, _p: Uint32Array | null, workgroups: readonly number[]): void {
    if (workgroups.some((w) => w === 0)) return;
    this.dispatchCount++;
  }

  /** @throws Error: a meta context compiles no kernel. */
  override pipeline(k: KernelCode): GPUComputePipeline {
    throw new Error(`pipeline: kernel '${k.key}' cannot be compiled on a meta GPU (no device)`);
  }

  /** @throws Error: a meta context runs nothing to time. */
  override startProfiling(): void {
    throw new Error('startProfiling: a meta GPU runs no kernels to time');
  }

  override stopProfiling(): Promise<KernelTime[]> {
    return Promise.resolve([]);
  }

  override flush(): void {}
}
