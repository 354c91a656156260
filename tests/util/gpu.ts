/** Shared test fixtures: one GPU context per test process, selected by the GPU env var. */
import { Gpu } from '../../src/gpu/context.ts';
import type { Backend } from '../../src/gpu/device.ts';
import './plane.ts';

let shared: Promise<Gpu> | null = null;

/** Uncaptured WebGPU errors of every device of this process since the last test ended. */
const uncaptured: string[] = [];
Gpu.onUncapturedError = (message) => void uncaptured.push(message);

/**
 * After each test: the shared device's queue is drained so that the test's last submits are
 * validated, then any uncaptured WebGPU error of any device (the shared one, or one a test opened
 * itself) fails that test — otherwise an error after the test's last read would go unseen, or be
 * thrown by the next test's first read.
 */
Deno.test.afterEach(async () => {
  const gpu = await shared?.catch(() => null);
  if (gpu && !gpu.lost) await gpu.sync().catch(() => {}); // its first error is also in `uncaptured`
  const errors = uncaptured.splice(0);
  if (errors.length) throw new Error(`uncaptured WebGPU error(s) during this test:\n${errors.join('\n')}`);
});

/**
 * After a file's last test: the shared device is destroyed once its queue is idle, so the process
 * does not exit with a live device whose driver may still be working (docs/design.md#runtime-quirks).
 */
Deno.test.afterAll(async () => {
  const gpu = await shared?.catch(() => null);
  shared = null;
  if (gpu) await drainAndDestroy(gpu);
});

/**
 * Waits for `gpu`'s queue (unless the device is lost), so that its last work is validated and an
 * uncaptured error still reaches {@link Gpu.onUncapturedError}, then destroys the device.
 * @throws (rejects with) the device's first uncaptured error; the device is destroyed either way.
 */
export async function drainAndDestroy(gpu: Gpu): Promise<void> {
  try {
    if (!gpu.lost) await gpu.sync();
  } finally {
    gpu.destroy();
  }
}

/** The backend the suite runs on: Deno's wgpu by default, Dawn with GPU=dawn; any other value is refused. */
export function testBackend(): Extract<Backend, 'wgpu' | 'dawn'> {
  const b = Deno.env.get('GPU') ?? 'wgpu';
  if (b !== 'wgpu' && b !== 'dawn') throw new Error(`GPU=${b}: the tests run on 'wgpu' (default) or 'dawn'`);
  return b;
}

/**
 * The test GPU, on {@link testBackend}; opening fails (no fallback) when that backend has no
 * adapter. Subgroup kernels are turned on (opt-in in the product) so every kernel test that
 * runs both variants reaches them wherever the adapter has `subgroups`.
 */
export function testGpu(): Promise<Gpu> {
  return (shared ??= Gpu.create({ backend: testBackend(), subgroups: 'available' }));
}

/**
 * Which implementation a device object belongs to, independently of the label `Gpu.backend`
 * carries: Deno's own WebGPU classes are wgpu's, npm:webgpu brings Dawn's.
 */
export function deviceImpl(gpu: Gpu): 'wgpu' | 'dawn' {
  const denoDevice = (globalThis as { GPUDevice?: abstract new () => unknown }).GPUDevice;
  return denoDevice && gpu.device instanceof denoDevice ? 'wgpu' : 'dawn';
}

/** A Deno test that uses the GPU; WebGPU objects outlive one test, so the sanitizers are off. */
export function gpuTest(name: string, fn: (gpu: Gpu) => Promise<void> | void): void {
  Deno.test({ name, sanitizeResources: false, sanitizeOps: false, fn: async () => await fn(await testGpu()) });
}

/**
 * Whether an f16 test runs its f16 path (true) or checks the refusal (false): the adapter's
 * `shader-f16`. Deno's wgpu, the suite's default backend, must have it — on the machine without
 * a GPU that is Mesa's lavapipe, which scripts/setup.sh installs and which offers it — so there
 * a missing feature fails the test instead of quietly turning every f16 test into a refusal
 * test. Only Dawn (SwiftShader lacks the feature) exercises the refusals.
 * @throws Error on a wgpu device without `shader-f16`.
 */
export function hasShaderF16(gpu: Gpu): boolean {
  if (gpu.features.has('shader-f16')) return true;
  if (deviceImpl(gpu) === 'wgpu') {
    throw new Error(
      `the wgpu adapter lacks 'shader-f16': the f16 tests would only check refusals; ` +
        'the suite expects lavapipe (scripts/setup.sh) or a GPU that has it',
    );
  }
  return false;
}
