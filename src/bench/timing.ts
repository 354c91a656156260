/**
 * Timing shared by the kernel benchmarks: kernels measured side by side in alternating
 * repetitions on the same device, so their ratio holds even when a busy CPU-WebGPU machine
 * makes absolute times wander (docs/design.md#runtime-quirks).
 */
import type { Gpu } from '../gpu/context.ts';

/** Timing knobs; the defaults keep a full matmul run of 128³…1024³ to about a minute on lavapipe. */
export interface BenchTiming {
  /** Timed repetitions (median taken); at least 3 (default 5, fewer for slow runs). */
  reps?: number;
  /** Each repetition batches calls until it lasts about this long, so submit latency does not dominate small shapes (ms, default 100). */
  minRepMs?: number;
  /** Stop adding repetitions once a kernel has spent this long on a shape (ms, default 15 000). */
  maxMsPerShape?: number;
}

/** n values uniform in [−1, 1) from a small LCG: deterministic, and no denormals or NaNs. */
export function fill(n: number, seed: number): Float32Array {
  const out = new Float32Array(n);
  let s = seed >>> 0;
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    out[i] = s / 2 ** 31 - 1;
  }
  return out;
}

/**
 * Times kernels side by side. Each `run(batch)` encodes `batch` calls. One warm-up call each
 * compiles pipelines and fills the pool, a second sizes each kernel's batch; then rounds time
 * every kernel once in turn (so a busy machine slows them alike) until `reps` rounds or the
 * time budget.
 * @returns the median time of one call in ms, per kernel.
 */
export async function timeKernels(
  gpu: Gpu,
  runs: ((batch: number) => void)[],
  t: Required<BenchTiming>,
): Promise<number[]> {
  const batches: number[] = [];
  for (const run of runs) {
    run(1);
    await gpu.sync();
    const t0 = performance.now();
    run(1);
    await gpu.sync();
    const once = performance.now() - t0;
    batches.push(Math.max(1, Math.min(256, Math.ceil(t.minRepMs / Math.max(once, 1e-3)))));
  }
  const times: number[][] = runs.map(() => []);
  const start = performance.now();
  for (let rep = 0; rep < t.reps && (rep < 3 || performance.now() - start < t.maxMsPerShape); rep++) {
    for (const [i, run] of runs.entries()) {
      const t0 = performance.now();
      run(batches[i]);
      await gpu.sync();
      times[i].push((performance.now() - t0) / batches[i]);
    }
  }
  return times.map((ts) => ts.sort((a, b) => a - b)[ts.length >> 1]);
}
