/**
 * A size-keyed buffer pool. Shapes repeat exactly from one training step to the next,
 * so after the first step every request is served from a free list and the step
 * creates no GPUBuffer at all (llm.c allocates once for the same reason).
 */
import { checkBufferSize } from './limits.ts';

/** Storage buffers the kernels read and write, copyable both ways. */
export const STORAGE_USAGE = 0x80 /* STORAGE */ | 0x4 /* COPY_SRC */ | 0x8; /* COPY_DST */

/** Accounting exposed to tests and benchmarks (all in bytes unless named count). */
export interface PoolStats {
  /** Bytes handed out and not yet released. */
  liveBytes: number;
  /** Largest `liveBytes` seen since the last `resetPeak()`. */
  peakBytes: number;
  /** Bytes of every GPUBuffer the pool created (free ones included). */
  createdBytes: number;
  /** How many GPUBuffers the pool created. */
  createdCount: number;
  /** Largest single request since the last `resetPeak()`. */
  largestBytes: number;
  /**
   * Bytes the holders of the live buffers asked for, before rounding up to {@link POOL_GRANULE} (a tensor's
   * size in whole 4-byte words): what the activation count (src/perf/activation_memory.ts) reports unrounded.
   */
  requestedBytes: number;
  /** Largest `requestedBytes` seen since the last `resetPeak()`. */
  requestedPeakBytes: number;
}

/** Buffers are handed out in multiples of this many bytes (also the binding-offset alignment). */
export const POOL_GRANULE = 256;

export class BufferPool {
  private free = new Map<number, GPUBuffer[]>();
  private sizes = new WeakMap<GPUBuffer, number>();
  /** What the holder of each handed-out buffer asked for. */
  private requested = new WeakMap<GPUBuffer, number>();
  readonly stats: PoolStats = {
    liveBytes: 0,
    peakBytes: 0,
    createdBytes: 0,
    createdCount: 0,
    largestBytes: 0,
    requestedBytes: 0,
    requestedPeakBytes: 0,
  };

  constructor(private readonly device: GPUDevice) {}

  /**
   * A storage buffer of at least `bytes` bytes (rounded up to {@link POOL_GRANULE}).
   * Its contents are whatever the previous user left: callers clear it when they need zeros.
   * @throws Error naming `maxBufferSize` when the request is over the device limit.
   */
  acquire(bytes: number, label = 'tensor'): GPUBuffer {
    const size = Math.max(POOL_GRANULE, Math.ceil(bytes / POOL_GRANULE) * POOL_GRANULE);
    checkBufferSize(this.device, size, label);
    let buf = this.free.get(size)?.pop();
    if (!buf) {
      buf = this.device.createBuffer({ size, usage: STORAGE_USAGE, label });
      this.sizes.set(buf, size);
      this.stats.createdBytes += size;
      this.stats.createdCount++;
    }
    const s = this.stats;
    s.liveBytes += size;
    s.peakBytes = Math.max(s.peakBytes, s.liveBytes);
    s.largestBytes = Math.max(s.largestBytes, size);
    this.requested.set(buf, bytes);
    s.requestedBytes += bytes;
    s.requestedPeakBytes = Math.max(s.requestedPeakBytes, s.requestedBytes);
    return buf;
  }

  /** Returns a buffer obtained from {@link acquire}; it may be handed out again at once. */
  release(buf: GPUBuffer): void {
    const size = this.sizes.get(buf);
    if (size === undefined) throw new Error('BufferPool.release: buffer was not acquired from this pool');
    this.stats.liveBytes -= size;
    this.stats.requestedBytes -= this.requested.get(buf) ?? 0;
    this.requested.delete(buf);
    let list = this.free.get(size);
    if (!list) this.free.set(size, list = []);
    list.push(buf);
  }

  /** Starts a new peak measurement window (peak and largest request). */
  resetPeak(): void {
    this.stats.peakBytes = this.stats.liveBytes;
    this.stats.requestedPeakBytes = this.stats.requestedBytes;
    this.stats.largestBytes = 0;
  }

  /** Destroys every free buffer. */
  trim(): void {
    for (const list of this.free.values()) {
      for (const b of list) {
        this.stats.createdBytes -= this.sizes.get(b) ?? 0;
        b.destroy();
      }
    }
    this.free.clear();
  }
}
