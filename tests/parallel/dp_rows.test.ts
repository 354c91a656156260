/**
 * Each data-parallel rank trains on its own rows of the global batch: per step and micro-batch,
 * the rows the ranks' models see are disjoint and together exactly the rows the single-rank
 * Trainer sees — for plain dp and ZeRO-3 (both run on the mesh trainer). Loss parity alone
 * would not notice ranks that read overlapping rows whose mean happens to agree.
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
    'dp3 and dp3 × ZeRO-3: per micro-batch the ranks draw disjoint rows whose union is the single-rank global batch',
  ...WORKER_TEST,
  fn: async () => {
    const cfg = tinyConfig({ batchSize: 6, gradAccum: 2, steps: 2 });
    const ref = await reference(await testGpu(), cfg);
    const t = cfg.blockSize!, d = 3, b = cfg.batchSize! / d;
    equal(ref.rows.length, 2 * 2, 'the reference trains 2 steps × 2 micro-batches');
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
          equal(x.rows!.length, ref.rows.length, `stage ${stage} rank ${r}: one forward per micro-batch`);
        }
        for (const [k, global] of ref.rows.entries()) {
          const drawn = partitionRows(global, res.map((x) => x.rows![k]), t);
          for (const [r, idx] of drawn.entries()) {
            deepStrictEqual(
              idx,
              Array.from({ length: b }, (_, i) => r * b + i),
              `stage ${stage} micro-batch ${k}: rank ${r} takes rows [${r * b}, ${(r + 1) * b})`,
            );
          }
        }
      }
    });
  },
});
