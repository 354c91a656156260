/**
 * Test helper: launches worlds of tests/comm/scenario.worker.ts.
 *
 * `deno test` type-checks every module worker it starts, from scratch, per worker (≈4 s each on
 * the 2-core machine; its check cache is not used for workers), which would make a world of 8
 * cost half a minute. So the worker is bundled once per test process with `deno bundle` (plain
 * JS: nothing to check) — its types are still checked by `deno check tests`. If bundling fails
 * the TypeScript worker is used directly (correct, just slow).
 */
import '../util/plane.ts';
import { type LaunchOptions, World } from '../../src/comm/launch.ts';
import { openRankGpus } from '../util/rank_gpu.ts';
import { bundleWorker } from '../../src/cli/worker_bundle.ts';
import { DATA_PLANES, type DataPlane } from '../../src/comm/data_plane.ts';

const bundled = new Map<string, Promise<URL>>();

/**
 * URL of the bundled worker tests/comm/`name` (or `name` relative to tests/comm when it has a slash; built on first use, in a temp directory laid out
 * like the repository — `<tmp>/a/b/<name>.js` beside `<tmp>/shaders` and `<tmp>/public` links —
 * so the `new URL('../../shaders/…', import.meta.url)` that src/gpu/shaders.ts fetches, and
 * the test texts under public/data, resolve).
 */
export function workerUrl(name = 'scenario.worker.ts'): Promise<URL> {
  const SOURCE = new URL(name.includes('/') ? name : `./${name}`, import.meta.url);
  if (!bundled.has(name)) bundled.set(name, bundleWorker(SOURCE, ['shaders', 'public']));
  return bundled.get(name)!;
}

/** Both data planes (docs/design.md#the-shared-data-plane-of-worker-ranks): collective tests run on each. */
export const PLANES: readonly DataPlane[] = DATA_PLANES;

/**
 * Launches a world of `size` scenario workers, runs `body`, always shuts the world down. `extra`
 * may name the data plane; the world checks it got the one asked for.
 */
export async function withWorld<T>(
  size: number,
  body: (w: World) => Promise<T>,
  timeoutMs = 10_000,
  runTimeoutMs = 60_000,
  extra: Omit<LaunchOptions, 'size' | 'url' | 'spawn' | 'timeoutMs' | 'runTimeoutMs'> & { worker?: string } = {},
): Promise<T> {
  const { worker, ...rest } = extra;
  const w = await World.launch({ size, url: await workerUrl(worker), timeoutMs, runTimeoutMs, ...rest });
  if (rest.dataPlane && size > 1 && w.dataPlane !== rest.dataPlane) {
    await w.shutdown();
    throw new Error(`asked for the ${rest.dataPlane} plane, got ${w.dataPlane}`);
  }
  try {
    return await body(w);
  } finally {
    await w.shutdown();
  }
}

export type Report = { cases: number; failures: string[] };

/** Deno.test options for tests that start workers. */
export const WORKER_TEST = { sanitizeResources: false, sanitizeOps: false };

/**
 * Launches `size` workers of tests/parallel/`worker`, has each open its own GPU device on the
 * test's backend and checks it did (openRankGpus), runs `body`, has every rank close its device
 * (task `close`) and always shuts the world down. `dataPlane`: as World.launch (default: shared where usable).
 */
export async function withRankWorld<T>(
  worker: string,
  size: number,
  body: (w: World) => Promise<T>,
  dataPlane?: DataPlane,
): Promise<T> {
  const w = await World.launch({
    size,
    url: await workerUrl(`../parallel/${worker}`),
    timeoutMs: 60_000,
    runTimeoutMs: 240_000,
    dataPlane,
  });
  try {
    await openRankGpus(w);
    const out = await body(w);
    await w.run('close');
    return out;
  } finally {
    await w.shutdown();
  }
}
