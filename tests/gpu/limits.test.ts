import { equal, match, ok, throws } from 'node:assert/strict';
import { gpuTest } from '../util/gpu.ts';
import { DeviceLimitError } from '../../src/gpu/limits.ts';
import { openDevice } from '../../src/gpu/device.ts';

gpuTest('a tensor over a device limit fails with the limit name and the sizes', (gpu) => {
  const max = gpu.device.limits.maxStorageBufferBindingSize;
  const n = max / 4 + 64;
  const err = (() => {
    try {
      gpu.empty([n], 'f32', 'huge');
    } catch (e) {
      return e as Error;
    }
    throw new Error('expected a DeviceLimitError');
  })();
  ok(err instanceof DeviceLimitError);
  match(
    err.message,
    new RegExp(
      `tensor huge \\[${n}\\] \\(bytes\\) needs ${n * 4} but the device's maxStorageBufferBindingSize is ${max}`,
    ),
  );
  throws(() => gpu.dispatch({ key: 'x', code: '' }, [], null, [70_000]), /maxComputeWorkgroupsPerDimension is 65535/);
});

gpuTest('the buffer pool reuses released buffers and accounts live and peak bytes', (gpu) => {
  const s = gpu.pool.stats;
  gpu.pool.resetPeak();
  const live0 = s.liveBytes;
  const a = gpu.empty([1000]);
  equal(s.liveBytes - live0, 4096); // 4000 bytes rounded up to the 256-byte granule
  const createdAfterA = s.createdCount;
  a.release();
  const b = gpu.empty([1000]);
  equal(s.createdCount, createdAfterA, 'no new buffer for a same-size request');
  ok(b.buffer === a.buffer, 'same-size request is served from the free list');
  b.release();
  equal(s.liveBytes, live0);
  equal(s.peakBytes - live0, 4096);
  throws(() => b.binding(), /used after release/);
});

Deno.test('an unknown backend is rejected with the allowed list', async () => {
  let msg = '';
  try {
    await openDevice({ backend: 'metal' as never });
  } catch (e) {
    msg = (e as Error).message;
  }
  match(msg, /Unknown GPU backend 'metal'; allowed: auto, wgpu, dawn, browser/);
});
