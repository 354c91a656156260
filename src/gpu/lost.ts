/**
 * A lost GPU device (driver reset, GPU removed, out of memory on some drivers, or a tab's device
 * reclaimed): WebGPU resolves `device.lost` and later work fails with errors that do not say
 * why. The Gpu context records the loss ({@link LossWatch}) and every wait on the GPU then
 * throws this instead.
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

/** The Gpu context's watch on its device's `lost` promise: why it was lost, and waits that end with it. */
export class LossWatch {
  /** Set by {@link destroying}: the loss the context's own destroy causes is not a lost device. */
  private closing = false;
  /** Why the device was lost, once it was (not by the context's destroy). */
  private lostWith: DeviceLostError | null = null;
  /** Rejects with the DeviceLostError when the device is lost, so no wait outlives the device. */
  private readonly signal: Promise<never>;

  constructor(device: GPUDevice) {
    this.signal = device.lost.then((info) => {
      if (!this.closing) this.lostWith = new DeviceLostError(info.reason ?? 'unknown', info.message ?? '');
      throw this.lostWith ?? new Error('the GPU context was destroyed');
    });
    this.signal.catch(() => {}); // observed by the waits below; unobserved otherwise
  }

  /** The loss of the device, or null while it is alive (a destroy is not a loss). */
  get lost(): DeviceLostError | null {
    return this.lostWith;
  }

  /** Called by the context's destroy before it destroys the device, so that loss is not reported. */
  destroying(): void {
    this.closing = true;
  }

  /** `work`, or the DeviceLostError when the device is lost first (callers check for a past loss). */
  async until<T>(work: Promise<T>): Promise<T> {
    try {
      return await Promise.race([work, this.signal]);
    } catch (e) {
      // Work can fail on a lost device before `lost` resolves: give it a moment to say why.
      await Promise.race([this.signal.catch(() => {}), new Promise((r) => setTimeout(r, 100))]);
      throw this.lostWith ?? e;
    }
  }
}
