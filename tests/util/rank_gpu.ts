/**
 * The device of a test rank worker. The test process names the backend (task `openGpu`, args
 * from {@link testBackend}); a worker never picks one itself, so `GPU=dawn` reaches every rank and
 * a rank whose backend is missing fails instead of quietly running on another.
 */
import { Gpu } from '../../src/gpu/context.ts';
import type { World } from '../../src/comm/launch.ts';
import { deviceImpl, drainAndDestroy, testBackend } from './gpu.ts';

let gpu: Promise<Gpu> | undefined;

/** What a rank reports about its device, for the test to check. */
export interface RankGpuInfo {
  /** The backend the rank was asked for and opened. */
  backend: string;
  /** The implementation the device object actually belongs to (see deviceImpl). */
  impl: string;
  adapter: string;
}

/** This rank's device; throws when the test did not open it with `openGpu` first. */
export function rankGpu(): Promise<Gpu> {
  if (!gpu) throw new Error('rank worker: no device; the test opens it with task openGpu and its backend');
  return gpu;
}

/** Worker-side tasks: open the device on the given backend, and close it before the world terminates the worker. */
export const RANK_GPU_TASKS = {
  async openGpu(_world: unknown, args: { backend?: string }): Promise<RankGpuInfo> {
    if (args?.backend !== 'wgpu' && args?.backend !== 'dawn') {
      throw new Error(`openGpu: backend must be 'wgpu' or 'dawn', got ${args?.backend}`);
    }
    gpu ??= Gpu.create({ backend: args.backend });
    const g = await gpu;
    return { backend: g.backend, impl: deviceImpl(g), adapter: g.adapterDescription };
  },

  /** Waits for the queue (an uncaptured WebGPU error of the rank's last work fails the task), then destroys the device. */
  async close(): Promise<void> {
    const g = gpu && await gpu;
    gpu = undefined;
    if (g) await drainAndDestroy(g);
  },
};

/**
 * Host side: opens every rank's device on the test's backend and checks each rank reports that
 * backend and a device object of that implementation.
 * @throws Error naming the first rank on another backend.
 */
export async function openRankGpus(w: World): Promise<RankGpuInfo[]> {
  const want = testBackend();
  const infos = await w.run<RankGpuInfo>('openGpu', { backend: want });
  infos.forEach((info, r) => {
    if (info.backend !== want || info.impl !== want) {
      throw new Error(
        `rank ${r}: the test selected ${want}, the rank opened '${info.backend}' and holds a ${info.impl} device (${info.adapter})`,
      );
    }
  });
  return infos;
}
