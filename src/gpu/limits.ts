/**
 * Device-limit checks that fail with the limit's name and the sizes involved
 * (docs/design.md#webgpu-limits-that-shape-the-kernels).
 */

/** Raised when a request exceeds a device limit; `limit` is the WebGPU limit's name. */
export class DeviceLimitError extends Error {
  constructor(readonly limit: string, readonly requested: number, readonly allowed: number, what: string) {
    super(`${what} needs ${requested} but the device's ${limit} is ${allowed}`);
    this.name = 'DeviceLimitError';
  }
}

/**
 * Checks that a buffer of `bytes` fits `maxBufferSize`.
 * @throws DeviceLimitError naming `maxBufferSize`.
 */
export function checkBufferSize(device: GPUDevice, bytes: number, what: string): void {
  const max = device.limits.maxBufferSize;
  if (bytes > max) throw new DeviceLimitError('maxBufferSize', bytes, max, `${what} (bytes)`);
}

/**
 * Checks that one storage binding of `bytes` fits `maxStorageBufferBindingSize`.
 * @throws DeviceLimitError naming `maxStorageBufferBindingSize`.
 */
export function checkBindingSize(device: GPUDevice, bytes: number, what: string): void {
  const max = device.limits.maxStorageBufferBindingSize;
  if (bytes > max) throw new DeviceLimitError('maxStorageBufferBindingSize', bytes, max, `${what} (bytes)`);
}

/**
 * Checks a dispatch's workgroup counts against `maxComputeWorkgroupsPerDimension`.
 * @throws DeviceLimitError naming the limit.
 */
export function checkWorkgroups(device: GPUDevice, counts: readonly number[], what: string): void {
  const max = device.limits.maxComputeWorkgroupsPerDimension;
  for (const c of counts) {
    if (c > max) throw new DeviceLimitError('maxComputeWorkgroupsPerDimension', c, max, `${what} (workgroups)`);
  }
}
