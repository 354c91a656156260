/**
 * Opens a device with `--adapter` in a process of its own and prints `backend · description`, or
 * `error: message`: Dawn adds SwiftShader to the process's Vulkan drivers, which would leak into
 * every later wgpu device of an in-process test run (tests/gpu/adapter.test.ts).
 * Usage: deno run -A tests/util/open_adapter.ts BACKEND ADAPTER
 */
import { Gpu } from '../../src/gpu/context.ts';
import type { Backend } from '../../src/gpu/device.ts';

const [backend, adapter] = Deno.args;
try {
  const gpu = await Gpu.create({ backend: backend as Backend, adapter });
  console.log(`${gpu.backend} · ${gpu.adapterDescription}`);
  gpu.destroy();
} catch (e) {
  console.log(`error: ${(e as Error).message}`);
}
Deno.exit(0);
