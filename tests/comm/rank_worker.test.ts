/**
 * workers/rank.worker.ts as a rank of a world: it joins a launched world (ports from the
 * launcher, its own Communicator) and runs the shared collective matrix, while the same worker
 * keeps answering the single-rank training API the browser demo uses.
 */
import { deepStrictEqual, equal, ok } from 'node:assert/strict';
import * as Comlink from 'comlink';
import type { RankWorkerApi } from '../../workers/rank.worker.ts';
import { type Report, withWorld, WORKER_TEST, workerUrl } from './world.ts';
import { testBackend } from '../util/gpu.ts';

const RANK_WORKER = '../../workers/rank.worker.ts';

Deno.test({
  name: 'rank.worker.ts joins a world of 3 and passes the collective matrix',
  ...WORKER_TEST,
  fn: () =>
    withWorld(
      3,
      async (w) => {
        const reps = await w.run<Report>('matrix', null);
        deepStrictEqual(reps.flatMap((r) => r.failures), []);
        ok(reps.every((r) => r.cases > 500));
        await w.setNetwork('link=25GB/s,1us', true); // the matrix advanced the clocks: restart them at 0
        const clocks = await w.run<number>('one', { coll: 'allReduce', algorithm: 'ring', bytes: 3 * 4096 });
        // 4 steps of 1 µs + 4 KiB / 25 GB/s on a flat network.
        ok(clocks.every((t) => Math.abs(t - 4 * (1 + 4096 / 25e3)) < 1e-9), `${clocks}`);
      },
      10_000,
      60_000,
      { worker: RANK_WORKER, net: 'link=25GB/s,1us' },
    ),
});

Deno.test({
  name: 'one rank.worker.ts answers both the training API and the world-rank API',
  ...WORKER_TEST,
  fn: async () => {
    const worker = new Worker(await workerUrl(RANK_WORKER), { type: 'module', name: 'rank0' });
    const api = Comlink.wrap<RankWorkerApi>(worker);
    try {
      const info = await api.init({ text: 'hello world, hello ranks\n', backend: testBackend() });
      equal(info.backend, testBackend());
      equal(info.vocabSize, new Set('hello world, hello ranks\n').size);
      equal(info.corpusChars, 25);
      await api.join({ rank: 0, worldSize: 1, ports: [null], timeoutMs: 1000 });
      const res = await api.run('matrix', null) as Report;
      deepStrictEqual(res.failures, []);
      const spans = await api.trace(true);
      ok(spans.some((s) => s.kind === 'collective' && s.op === 'allReduce'));
      equal((await api.trace()).length, 0);
    } finally {
      api[Comlink.releaseProxy]();
      worker.terminate();
    }
  },
});
