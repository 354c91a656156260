/**
 * The browser demo's single-rank training (workers/rank.worker.ts `train`) runs the one training
 * loop (src/train/loop.ts): a progress record per drain (every log interval, every evaluation and
 * the last step), the evaluations, and a pause and stop at a step boundary.
 */
import { deepStrictEqual, equal, ok } from 'node:assert/strict';
import * as Comlink from 'comlink';
import type { RankWorkerApi } from '../../workers/rank.worker.ts';
import type { ProgressRecord } from '../../workers/rank_api.ts';
import { WORKER_TEST, workerUrl } from '../comm/world.ts';
import { testBackend } from '../util/gpu.ts';

const TEXT = 'the quick brown fox jumps over the lazy dog.\n'.repeat(60);
const CFG = {
  nLayer: 1,
  nHead: 2,
  nEmbd: 32,
  blockSize: 16,
  batchSize: 4,
  evalBatches: 1,
  sampleTokens: 0,
  steps: 6,
  warmup: 1,
  logInterval: 2,
  evalInterval: 3,
};

/** Runs `body` with an initialised rank worker and the progress records it sent. */
async function withRank(body: (api: Comlink.Remote<RankWorkerApi>, recs: ProgressRecord[]) => Promise<void>) {
  const worker = new Worker(await workerUrl('../../workers/rank.worker.ts'), { type: 'module', name: 'rank0' });
  const api = Comlink.wrap<RankWorkerApi>(worker);
  try {
    await api.init({ text: TEXT, backend: testBackend() });
    await body(api, []);
  } finally {
    api[Comlink.releaseProxy]();
    worker.terminate();
  }
}

Deno.test({
  name: 'rank worker train: progress at every log interval, evaluation and the end; evaluations every evalInterval',
  ...WORKER_TEST,
  fn: () =>
    withRank(async (api, recs) => {
      const s = await api.train(CFG, Comlink.proxy((r: ProgressRecord) => void recs.push(r)));
      deepStrictEqual([s.steps, s.stopped], [6, false]);
      // Drains after 2, 3 (evaluation), 4 and 6 steps done: the records of steps 1, 2, 3, 5.
      const train = recs.filter((r) => r.kind === 'train');
      deepStrictEqual(train.map((r) => r.step), [1, 2, 3, 5]);
      deepStrictEqual(train.map((r) => r.points.map(([x]) => x)), [[0, 1], [2], [3], [4, 5]]);
      ok(train.every((r) => Number.isFinite(r.loss) && r.ms > 0), JSON.stringify(train));
      const evals = recs.filter((r) => r.kind === 'eval');
      deepStrictEqual(evals.map((r) => r.step), [2, 5]);
      equal(s.valLoss, evals[1].valLoss);
      equal(s.finalLoss, train[3].loss);
    }),
});

Deno.test({
  name: 'rank worker train: a pause holds the run at a drain; a stop then ends it at the next step boundary',
  ...WORKER_TEST,
  fn: () =>
    withRank(async (api, recs) => {
      await api.pause();
      const onProgress = (r: ProgressRecord) => {
        recs.push(r);
        if (r.kind === 'status' && r.text.startsWith('paused')) void api.stop();
      };
      const s = await api.train(CFG, Comlink.proxy(onProgress));
      ok(recs.some((r) => r.kind === 'status' && r.text === 'paused after step 1'), JSON.stringify(recs));
      // The stop resumes the pause; the step after it runs, is drained, and ends the run without its evaluation.
      deepStrictEqual([s.steps, s.stopped], [3, true]);
      deepStrictEqual(recs.filter((r) => r.kind === 'train').map((r) => r.step), [1, 2]);
      deepStrictEqual(recs.filter((r) => r.kind === 'eval'), []);
      equal(s.valLoss, null);
    }),
});
