/**
 * The page's handles on rank workers (workers/rank.worker.ts, bundled by Vite): rank 0 of the
 * training demo wrapped with comlink ({@link startRank}), and {@link spawnRankWorker} for
 * `World.launch({ spawn })` (src/comm/launch.ts), which starts a world of them.
 */
import * as Comlink from 'comlink';
import type { RankApi } from '../../workers/rank_api.ts';

export type { ProgressRecord, RankInfo, TrainSummary } from '../../workers/rank_api.ts';

export interface RankHandle {
  api: Comlink.Remote<RankApi>;
  worker: Worker;
  /** Ends the worker (and its GPUDevice). */
  terminate(): void;
}

/**
 * A new rank worker named `rank<r>`. The `new Worker(new URL(…), { type: 'module' })` must stay
 * literal: it is what makes Vite bundle the worker.
 */
export function spawnRankWorker(r: number): Worker {
  return new Worker(new URL('../../workers/rank.worker.ts', import.meta.url), { type: 'module', name: `rank${r}` });
}

/** Starts one rank worker. Errors thrown while loading the worker reach `onError`. */
export function startRank(onError: (message: string) => void): RankHandle {
  const worker = spawnRankWorker(0);
  worker.addEventListener('error', (ev) => onError(ev.message || 'the rank worker failed to load'));
  const api = Comlink.wrap<RankApi>(worker);
  return {
    api,
    worker,
    terminate: () => {
      api[Comlink.releaseProxy]();
      worker.terminate();
    },
  };
}

/** Wraps a progress callback so the worker can call it across the thread boundary. */
export function progressProxy<T extends (...args: never[]) => unknown>(fn: T): T & Comlink.ProxyMarked {
  return Comlink.proxy(fn);
}
