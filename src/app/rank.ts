/**
 * The page's handle on rank 0: a module worker (workers/rank.worker.ts, bundled by Vite)
 * wrapped with comlink. More ranks come with the parallelism work; each will be one of these.
 */
import * as Comlink from 'comlink';
import type { RankApi } from '../../workers/rank.worker.ts';

export type { ProgressRecord, RankInfo, TrainSummary } from '../../workers/rank.worker.ts';

export interface RankHandle {
  api: Comlink.Remote<RankApi>;
  worker: Worker;
  /** Ends the worker (and its GPUDevice). */
  terminate(): void;
}

/** Starts one rank worker. Errors thrown while loading the worker reach `onError`. */
export function startRank(onError: (message: string) => void): RankHandle {
  const worker = new Worker(new URL('../../workers/rank.worker.ts', import.meta.url), { type: 'module', name: 'rank0' });
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
