/**
 * The GPU context every kernel dispatches through: one device, its buffer pool, caches of
 * pipelines, uniform buffers and bind groups (dispatch_cache.ts), and one open command encoder
 * that batches all work until something needs the results (a read) or host data must be written.
 */
import { openDevice, type OpenedDevice } from './device.ts';
import { BufferPool } from './pool.ts';
import { type DType, type HostArray, hostArray, storageBytes, Tensor } from './tensor.ts';
import { checkBindingSize, checkWorkgroups } from './limits.ts';
import { loadShaders, type ShaderName } from './shaders.ts';
import { type KernelTime, Profiler } from './profiler.ts';
import { DispatchCache } from './dispatch_cache.ts';
import { type DeviceLostError, LossWatch } from './lost.ts';
import { checkSubgroupChoice, type GpuOptions, subgroupsFor } from './subgroups.ts';

export type { GpuOptions, SubgroupChoice } from './subgroups.ts';

/** A compiled-on-demand kernel: `key` names the specialisation, `code` is its WGSL. */
export interface KernelCode {
  key: string;
  code: string;
  entryPoint?: string;
}

/** One binding of a dispatch: a tensor, a raw buffer range, or a hole (binding unused by this entry point). */
export type Binding = Tensor | GPUBufferBinding | undefined;

export class Gpu {
  /**
   * Told every uncaptured WebGPU error of every device this module opens, as it arrives (a read or
   * sync only throws the first one, and only if one comes later). The tests set it so that an
   * error makes the test that caused it fail (tests/util/gpu.ts), wherever its device came from.
   */
  static onUncapturedError: ((message: string, gpu: Gpu) => void) | null = null;
  readonly device: GPUDevice;
  readonly pool: BufferPool;
  readonly backend: OpenedDevice['backend'];
  readonly adapterDescription: string;
  /** The CPU driver behind the adapter (device.ts softwareDriver), null on a GPU; kernels pick variants by it. */
  readonly softwareDriver: string | null;
  readonly features: ReadonlySet<string>;
  /** Software adapter (see OpenedDevice.isCpu); kernels pick CPU-friendly variants. */
  readonly isCpu: boolean;
  /** Whether kernels take their subgroup variants (opt-in: subgroups.ts); benchmarks flip it to time both. */
  subgroups: boolean;
  private readonly cache: DispatchCache;
  private encoder: GPUCommandEncoder | null = null;
  private pass: GPUComputePassEncoder | null = null;
  private firstError: string | null = null;
  private profiler: Profiler | null = null;
  /** Dispatches encoded since creation (for benchmarks and tests). */
  dispatchCount = 0;
  /** The device's loss, recorded once and raced by every wait on the GPU (lost.ts). */
  private readonly loss: LossWatch;

  /** Whether this context has no device (meta.ts): tensors are shapes and dtypes only, dispatches do nothing. */
  get isMeta(): boolean {
    return false;
  }

  protected constructor(
    private readonly opened: OpenedDevice,
    readonly shaders: Record<ShaderName, string>,
    subgroups: boolean,
  ) {
    this.device = opened.device;
    this.backend = opened.backend;
    this.adapterDescription = opened.adapterInfo.description;
    this.softwareDriver = opened.softwareDriver;
    this.features = new Set(opened.features);
    this.isCpu = opened.isCpu;
    this.subgroups = subgroups;
    this.pool = new BufferPool(this.device);
    this.cache = new DispatchCache(this.device);
    this.device.addEventListener('uncapturederror', (ev) => {
      const msg = (ev as GPUUncapturedErrorEvent).error.message;
      if (!this.firstError) this.firstError = msg;
      Gpu.onUncapturedError?.(msg, this);
    });
    this.loss = new LossWatch(this.device);
  }

  /** The loss of the device, or null while it is alive (a destroy() is not a loss). */
  get lost(): DeviceLostError | null {
    return this.loss.lost;
  }

  /**
   * Opens a device on `backend` and loads the shaders.
   * @throws Error from {@link openDevice} when no adapter exists (names the driver to install),
   *   and for a `subgroups` choice that is not allowed or is 'on' without the feature.
   */
  static async create(opts: GpuOptions = {}): Promise<Gpu> {
    const choice = checkSubgroupChoice(opts.subgroups);
    const [opened, shaders] = await Promise.all([openDevice(opts), loadShaders()]);
    try {
      return new Gpu(opened, shaders, subgroupsFor(choice, opened));
    } catch (e) {
      opened.close();
      throw e;
    }
  }

  /** Destroys the device (required on Dawn for the process to exit). */
  destroy(): void {
    this.loss.destroying();
    if (!this.lost) this.flush();
    this.opened.close();
  }

  // ---- tensors -------------------------------------------------------------------------

  /** An uninitialised tensor from the pool. @throws DeviceLimitError over maxBufferSize. */
  empty(shape: readonly number[], dtype: DType = 'f32', label = ''): Tensor {
    const bytes = storageBytes(shape.reduce((a, b) => a * b, 1), dtype);
    checkBindingSize(this.device, bytes, `tensor ${label} [${shape}]`);
    return new Tensor(this, this.pool.acquire(bytes, label || 'tensor'), shape, dtype, 0, true, label);
  }

  /** A zero-filled tensor from the pool. */
  zeros(shape: readonly number[], dtype: DType = 'f32', label = ''): Tensor {
    const t = this.empty(shape, dtype, label);
    this.clear(t);
    return t;
  }

  /** A tensor holding `data` (copied). */
  upload(data: HostArray | readonly number[], shape: readonly number[], dtype: DType = 'f32', label = ''): Tensor {
    const t = this.empty(shape, dtype, label);
    this.write(t, data);
    return t;
  }

  /**
   * Writes host data into a tensor. Pending work is submitted first: a pooled buffer may
   * still be read by commands encoded for its previous owner, and queue writes overtake
   * unsubmitted commands.
   * @throws Error when the data length differs from the tensor's size.
   */
  write(t: Tensor, data: HostArray | readonly number[]): void {
    if (data.length !== t.size) throw new Error(`write: ${data.length} values for tensor [${t.shape}] of ${t.size}`);
    let arr = Array.isArray(data) ? hostArray(t.dtype, data) : data as HostArray;
    if (arr.byteLength % 4) {
      // writeBuffer moves whole 4-byte words: an odd number of halves gets a zero half after it.
      const padded = new Float16Array(arr.length + 1);
      padded.set(arr as Float16Array);
      arr = padded;
    }
    this.flush();
    this.device.queue.writeBuffer(t.buffer, t.offset, arr as Float32Array<ArrayBuffer>);
  }

  /** Encodes a fill with zeros. */
  clear(t: Tensor): void {
    if (t.bytes === 0) return;
    this.endPass();
    this.enc().clearBuffer(t.buffer, t.offset, Math.ceil(t.bytes / 4) * 4);
  }

  /** Encodes a copy of `src` into `dst` (same size). */
  copy(src: Tensor, dst: Tensor): void {
    if (src.size !== dst.size) throw new Error(`copy: sizes differ ([${src.shape}] vs [${dst.shape}])`);
    this.endPass();
    this.enc().copyBufferToBuffer(src.buffer, src.offset, dst.buffer, dst.offset, src.wordBytes);
  }

  /**
   * Reads a tensor back to the host. This is the only place a step waits for the GPU.
   * @throws DeviceLostError once the device is lost; Error carrying the first WebGPU validation
   *   error seen since the last read.
   */
  async read(t: Tensor): Promise<HostArray> {
    if (this.lost) throw this.lost;
    const bytes = Math.max(4, t.wordBytes);
    const staging = this.device.createBuffer({
      size: bytes,
      usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
    });
    this.endPass();
    this.enc().copyBufferToBuffer(t.buffer, t.offset, staging, 0, bytes);
    this.flush();
    await this.loss.until(staging.mapAsync(GPUMapMode.READ));
    const copy = staging.getMappedRange().slice(0);
    staging.unmap();
    staging.destroy();
    this.throwIfError();
    return hostArray(t.dtype, copy).subarray(0, t.size);
  }

  /** Waits until all submitted work finished. @throws DeviceLostError once the device is lost; the first validation error seen. */
  async sync(): Promise<void> {
    if (this.lost) throw this.lost;
    this.flush();
    await this.loss.until(this.device.queue.onSubmittedWorkDone());
    this.throwIfError();
    if (this.lost) throw this.lost;
  }

  private throwIfError(): void {
    if (this.firstError) {
      const e = this.firstError;
      this.firstError = null;
      throw new Error(`WebGPU error: ${e}`);
    }
  }

  // ---- dispatch -------------------------------------------------------------------------

  /** The compute pipeline for a kernel, compiled once per `key`. */
  pipeline(k: KernelCode): GPUComputePipeline {
    return this.cache.pipeline(k);
  }

  /**
   * Encodes one dispatch. Binding i is `bindings[i]` (holes are skipped, for entry points
   * that share a file but not all its bindings); when `params` is given it is bound as a
   * uniform at binding `bindings.length`. Uniform buffers are cached by content, so repeated
   * shapes create nothing new.
   * @throws DeviceLimitError when a workgroup count is over maxComputeWorkgroupsPerDimension.
   */
  dispatch(
    k: KernelCode,
    bindings: readonly Binding[],
    params: Uint32Array | null,
    workgroups: readonly number[],
  ): void {
    checkWorkgroups(this.device, workgroups, k.key);
    if (workgroups.some((w) => w === 0)) return;
    const pipeline = this.pipeline(k);
    const bg = this.cache.bindGroup(k, pipeline, bindings, params);
    let timed: GPUComputePassEncoder | null = null;
    if (this.profiler) {
      this.endPass();
      timed = this.profiler.beginPass(this.enc(), k.key);
    }
    const pass = timed ?? this.computePass();
    pass.setPipeline(pipeline);
    pass.setBindGroup(0, bg);
    pass.dispatchWorkgroups(workgroups[0], workgroups[1] ?? 1, workgroups[2] ?? 1);
    timed?.end();
    this.dispatchCount++;
  }

  /**
   * Starts timing every dispatch by kernel key (timestamp queries).
   * @throws Error when the adapter lacks 'timestamp-query'.
   */
  startProfiling(): void {
    this.profiler ??= new Profiler(this.device);
  }

  /** Stops profiling and returns GPU time per kernel key since {@link startProfiling}, slowest first. */
  async stopProfiling(): Promise<KernelTime[]> {
    const prof = this.profiler;
    if (!prof) return [];
    this.endPass();
    const r = prof.resolveInto(this.enc());
    this.flush();
    this.profiler = null;
    const out = r ? await Profiler.totals(r) : [];
    prof.destroy();
    return out;
  }

  /** Submits everything encoded so far. */
  flush(): void {
    if (!this.encoder) return;
    this.endPass();
    this.device.queue.submit([this.encoder.finish()]);
    this.encoder = null;
  }

  private enc(): GPUCommandEncoder {
    return (this.encoder ??= this.device.createCommandEncoder());
  }

  private computePass(): GPUComputePassEncoder {
    return (this.pass ??= this.enc().beginComputePass());
  }

  private endPass(): void {
    if (this.pass) {
      this.pass.end();
      this.pass = null;
    }
  }
}

/** Reinterprets an f32 as its u32 bits, for packing floats into `params` arrays. */
export function f32bits(x: number): number {
  F32[0] = x;
  return U32[0];
}
const F32 = new Float32Array(1);
const U32 = new Uint32Array(F32.buffer);

/** Ceil-division, for workgroup counts. */
export function cdiv(a: number, b: number): number {
  return Math.ceil(a / b);
}
