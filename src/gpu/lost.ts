/**
 * A lost GPU device (driver reset, GPU removed, out of memory on some drivers, or a tab's device
 * reclaimed): WebGPU resolves `device.lost` and later work fails with errors that do not say
 * why. The Gpu context records the loss and every wait on the GPU then throws this instead.
 */

/** Raised by a read or sync after the device was lost (not by the context's own destroy). */
export class DeviceLostError extends Error {
  constructor(readonly reason: string, readonly detail: string) {
    super(
      `the GPU device was lost (reason '${reason}'${detail ? `: ${detail}` : ''}); ` +
        'nothing computed after the loss is kept',
    );
    this.name = 'DeviceLostError';
  }
}
