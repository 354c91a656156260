/**
 * Test helper: launches worlds of tests/dist/scenario.worker.ts.
 *
 * `deno test` type-checks every module worker it starts, from scratch, per worker (≈4 s each on
 * the 2-core machine; its check cache is not used for workers), which would make a world of 8
 * cost half a minute. So the worker is bundled once per test process with `deno bundle` (plain
 * JS: nothing to check) — its types are still checked by `deno check tests`. If bundling fails
 * the TypeScript worker is used directly (correct, just slow).
 */
import { World } from '../../src/dist/launch.ts';

const SOURCE = new URL('./scenario.worker.ts', import.meta.url);
let bundled: Promise<URL> | undefined;

/** URL of the bundled scenario worker (built on first use, in a temp directory). */
export function workerUrl(): Promise<URL> {
  bundled ??= (async () => {
    try {
      const dir = await Deno.makeTempDir({ prefix: 'dist-worker-' });
      const out = `${dir}/scenario.worker.js`;
      const res = await new Deno.Command(Deno.execPath(), {
        args: ['bundle', '--quiet', SOURCE.pathname, '-o', out],
        stdout: 'null',
        stderr: 'piped',
      }).output();
      if (!res.success) throw new Error(new TextDecoder().decode(res.stderr));
      return new URL(`file://${out}`);
    } catch (e) {
      console.warn(`bundling the scenario worker failed, using the TS worker (slow): ${e}`);
      return SOURCE;
    }
  })();
  return bundled;
}

/** Launches a world of `size` scenario workers, runs `body`, always shuts the world down. */
export async function withWorld<T>(
  size: number,
  body: (w: World) => Promise<T>,
  timeoutMs = 10_000,
  runTimeoutMs = 60_000,
): Promise<T> {
  const w = await World.launch({ size, url: await workerUrl(), timeoutMs, runTimeoutMs });
  try {
    return await body(w);
  } finally {
    await w.shutdown();
  }
}

export type Report = { cases: number; failures: string[] };

/** Deno.test options for tests that start workers. */
export const WORKER_TEST = { sanitizeResources: false, sanitizeOps: false };
