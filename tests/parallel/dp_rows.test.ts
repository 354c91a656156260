/**
 * Each data-parallel rank trains on its own rows of the global batch: per step and micro-batch j,
 * rank r of d sees rows [j·B + r·B/d, j·B + (r+1)·B/d) of the rows the plain single-rank Trainer
 * sees (the whole global batch in one micro-batch; data/dataset.ts batch order) — for plain dp and
 * ZeRO-3 (both run on the mesh trainer). Loss parity alone would not notice ranks that read
 * overlapping rows whose mean happens to agree.
 */
import { deepStrictEqual, equal, throws } from 'node:assert/strict';
import { testGpu } from '../util/gpu.ts';
import { reference, type RunResult, TEXT, tinyConfig, withDpWorld, WORKER_TEST } from './harness.ts';
import { partitionRows } from './rows.ts';

Deno.test('partitionRows refuses a row drawn twice and a row drawn by nobody', () => {
  const global = [1, 2, 3, 4, 5, 6];
  deepStrictEqual(partitionRows(global, [[5, 6], [1, 2, 3, 4]], 2), [[2], [0, 1]]);
  throws(() => partitionRows(global, [[1, 2], [1, 2]], 2), /rank 1 row 0 is not a global row left undrawn/);
  throws(() => partitionRows(global, [[1, 2], [3, 4]], 2), /global rows 2 are drawn by no rank/);
});

Deno.test({
  name:
    'dp3 and dp3 × ZeRO-3: micro-batch j of rank r is rows [j·B + r·B/d, j·B + (r+1)·B/d) of the plain single-rank global batch',
  ...WORKER_TEST,
  fn: async () => {
    const cfg = tinyConfig({ batchSize: 6, gradAccum: 2, steps: 2 });
    const ref = await reference(await testGpu(), cfg);
    const t = cfg.blockSize!, d = 3, B = cfg.batchSize!, b = B / d, m = 2;
    equal(ref.rows.length, 2, 'the plain reference trains 2 steps of one micro-batch each');
    await withDpWorld(d, async (w) => {
      for (const stage of [0, 3]) {
        const res = await w.run<RunResult>('train', {
          cfg,
          text: TEXT,
          stage: stage || undefined,
          bucketBytes: 'layer',
          recordRows: true,
        });
        for (const [r, x] of res.entries()) {
          equal(x.rows!.length, 2 * m, `stage ${stage} rank ${r}: one forward per micro-batch`);
        }
        for (const [s, global] of ref.rows.entries()) {
          for (let j = 0; j < m; j++) {
            const micro = global.slice(j * B * t, (j + 1) * B * t);
            const drawn = partitionRows(micro, res.map((x) => x.rows![s * m + j]), t);
            for (const [r, idx] of drawn.entries()) {
              deepStrictEqual(
                idx,
                Array.from({ length: b }, (_, i) => r * b + i),
                `stage ${stage} step ${s} micro-batch ${j}: rank ${r} takes global rows [${j * B + r * b}, ${
                  j * B + (r + 1) * b
                })`,
              );
            }
          }
        }
      }
    });
  },
});
