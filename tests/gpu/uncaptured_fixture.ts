/**
 * Not a test of the suite (its name does not end in test.ts): tests/gpu/uncaptured_error.test.ts
 * runs it with `deno test` to check that tests/util/gpu.ts fails the test whose work raised an
 * uncaptured WebGPU error, even after that test's last read, and not the test after it.
 */
import { gpuTest } from '../util/gpu.ts';

gpuTest('submits a destroyed buffer after its last read', async (gpu) => {
  await gpu.read(gpu.zeros([4]));
  const b = gpu.device.createBuffer({
    size: 16,
    usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST,
    label: 'destroyed on purpose',
  });
  b.destroy();
  const enc = gpu.device.createCommandEncoder();
  enc.clearBuffer(b);
  gpu.device.queue.submit([enc.finish()]);
});

gpuTest('reads after it', async (gpu) => {
  await gpu.read(gpu.zeros([4]));
});
