/**
 * A lost device (src/gpu/lost.ts): after `device.lost` resolves, every wait on the GPU throws
 * DeviceLostError naming the reason, instead of the backends' own unexplained failures; the
 * context's own destroy() is not a loss.
 */
import { equal, match, ok, rejects } from 'node:assert/strict';
import { Gpu } from '../../src/gpu/context.ts';
import { DeviceLostError } from '../../src/gpu/lost.ts';
import { testBackend } from '../util/gpu.ts';

Deno.test({
  name: 'a lost device: read and sync throw DeviceLostError with the reason; destroy() is not a loss',
  sanitizeResources: false,
  sanitizeOps: false,
  fn: async () => {
    const gpu = await Gpu.create({ backend: testBackend() });
    const t = gpu.upload(new Float32Array([1, 2, 3]), [3]);
    equal((await gpu.read(t))[2], 3);
    equal(gpu.lost, null);
    gpu.device.destroy(); // what a driver reset looks like from here
    for (const [what, call] of [['read', () => gpu.read(t)], ['sync', () => gpu.sync()]] as const) {
      await rejects(call(), (e: Error) => {
        ok(e instanceof DeviceLostError, `${what}: ${e.name}: ${e.message}`);
        match(e.message, /the GPU device was lost \(reason 'destroyed'/);
        return true;
      });
    }
    ok((gpu.lost as DeviceLostError | null) instanceof DeviceLostError, 'gpu.lost is set');
    gpu.destroy();

    const other = await Gpu.create({ backend: testBackend() });
    other.destroy();
    // The event itself, not a delay: the context's watch saw `lost` resolve before this await returns.
    equal((await other.device.lost).reason, 'destroyed');
    equal(other.lost, null, 'a destroy() of our own is not a lost device');
  },
});
