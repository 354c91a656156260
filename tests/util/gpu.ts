/** Shared test fixtures: one GPU context per test process, selected by the GPU env var. */
import { Gpu } from '../../src/gpu/context.ts';
import type { Backend } from '../../src/gpu/device.ts';

let shared: Promise<Gpu> | null = null;

/** The test GPU: Deno's wgpu by default, Dawn with GPU=dawn. */
export function testGpu(): Promise<Gpu> {
  const backend = (Deno.env.get('GPU') ?? 'wgpu') as Backend;
  return (shared ??= Gpu.create({ backend }));
}

/** A Deno test that uses the GPU; WebGPU objects outlive one test, so the sanitizers are off. */
export function gpuTest(name: string, fn: (gpu: Gpu) => Promise<void>): void {
  Deno.test({ name, sanitizeResources: false, sanitizeOps: false, fn: async () => fn(await testGpu()) });
}
