/**
 * GPU time per kernel from timestamp queries: while profiling, every dispatch runs in its own
 * compute pass whose beginning and end write timestamps, and `read()` folds the intervals by
 * kernel key. Needs the optional `timestamp-query` feature; the extra passes cost a little,
 * so profile only in benchmarks, never in a timed measurement.
 */

/** GPU time of one kernel key over the profiled window. */
export interface KernelTime {
  key: string;
  count: number;
  /** Summed GPU time, milliseconds. */
  ms: number;
}

export class Profiler {
  private readonly querySet: GPUQuerySet;
  private readonly resolve: GPUBuffer;
  private keys: string[] = [];

  /** @throws Error when the device lacks `timestamp-query`. */
  constructor(private readonly device: GPUDevice, private readonly capacity = 2048) {
    if (!device.features.has('timestamp-query')) {
      throw new Error("Profiling needs the 'timestamp-query' feature, which this adapter does not offer");
    }
    this.querySet = device.createQuerySet({ type: 'timestamp', count: 2 * capacity });
    this.resolve = device.createBuffer({
      size: 16 * capacity,
      usage: GPUBufferUsage.QUERY_RESOLVE | GPUBufferUsage.COPY_SRC,
    });
  }

  /** A compute pass that times one dispatch of `key`, or null when the window is full. */
  beginPass(encoder: GPUCommandEncoder, key: string): GPUComputePassEncoder | null {
    const i = this.keys.length;
    if (i >= this.capacity) return null;
    this.keys.push(key);
    return encoder.beginComputePass({
      timestampWrites: { querySet: this.querySet, beginningOfPassWriteIndex: 2 * i, endOfPassWriteIndex: 2 * i + 1 },
    });
  }

  /** Encodes the resolve of the window's timestamps; call before submitting the encoder. */
  resolveInto(encoder: GPUCommandEncoder): { staging: GPUBuffer; keys: string[] } | null {
    const n = this.keys.length;
    if (!n) return null;
    const staging = this.device.createBuffer({
      size: 16 * n,
      usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
    });
    encoder.resolveQuerySet(this.querySet, 0, 2 * n, this.resolve, 0);
    encoder.copyBufferToBuffer(this.resolve, 0, staging, 0, 16 * n);
    const keys = this.keys;
    this.keys = [];
    return { staging, keys };
  }

  /** Per-key totals of a resolved window, slowest first. */
  static async totals(r: { staging: GPUBuffer; keys: string[] }): Promise<KernelTime[]> {
    await r.staging.mapAsync(GPUMapMode.READ);
    const t = new BigUint64Array(r.staging.getMappedRange().slice(0));
    r.staging.unmap();
    r.staging.destroy();
    const by = new Map<string, KernelTime>();
    r.keys.forEach((key, i) => {
      const ns = t[2 * i + 1] > t[2 * i] ? Number(t[2 * i + 1] - t[2 * i]) : 0;
      const e = by.get(key) ?? { key, count: 0, ms: 0 };
      e.count++;
      e.ms += ns / 1e6;
      by.set(key, e);
    });
    return [...by.values()].sort((a, b) => b.ms - a.ms);
  }

  destroy(): void {
    this.querySet.destroy();
    this.resolve.destroy();
  }
}
