/**
 * The Communication panel's compression figures (src/app/panels/comm_compression.ts): predicted
 * bytes per dimension raw and compressed are compression_report.ts's rows summed over every rank
 * and the steps; measured bytes come from send spans inside training steps, by dimension.
 */
import { deepStrictEqual, equal, ok } from 'node:assert/strict';
import { compressionBytes } from '../../src/app/panels/comm_compression.ts';
import { parseCompressPolicy } from '../../src/comm/compression.ts';
import type { Span } from '../../src/comm/trace.ts';
import { stepTraffic } from '../../src/parallel/cost/cost.ts';
import { makePlan, type PlanModel } from '../../src/parallel/plan/plan.ts';
import { shapeCompressionByDim } from '../../src/perf/compression_report.ts';

const MODEL: PlanModel = { nLayer: 2, nHead: 2, nEmbd: 32, blockSize: 16, batchSize: 8, vocabSize: 65 };
const bytes = (rows: { elements: number }[]) => rows.reduce((a, r) => a + 4 * r.elements, 0);

const send = (rank: number, group: string, b: number, step?: number): Span => ({
  rank,
  kind: 'send',
  op: 'allToAll',
  group,
  algorithm: 'direct',
  bytes: b,
  peer: 0,
  start: 0,
  end: 0,
  simStart: 0,
  simEnd: 0,
  ...(step === undefined ? {} : { step }),
});

Deno.test('compression figures: raw and compressed per dimension are the plan report rows over ranks and steps', () => {
  const plan = makePlan({ dp: 2, pp: 2, microBatches: 2, compress: parseCompressPolicy('dp=topk:0.1,pp=int8') });
  const rows = compressionBytes({ plan, model: MODEL, steps: 3 });
  deepStrictEqual(rows.map((r) => [r.dim, r.scheme]), [['dp', 'topk:0.1'], ['pp', 'int8:256']]);
  for (const r of rows) {
    let raw = 0, packed = 0, unplanned = 0;
    for (let k = 0; k < 4; k++) {
      const d = shapeCompressionByDim(plan, MODEL, {}, k).find((x) => x.dim === r.dim)!;
      raw += 3 * bytes(d.raw);
      packed += 3 * bytes(d.packed);
      unplanned += 3 * bytes(stepTraffic({ ...plan, compress: undefined }, MODEL, k).filter((x) => x.dim === r.dim));
    }
    equal(r.raw, raw, r.dim);
    equal(r.raw, unplanned, `${r.dim}: raw is stepTraffic without the policy`);
    equal(r.compressed, packed, r.dim);
    ok(r.compressed < r.raw, `${r.dim} compresses`);
    equal(r.exact, true);
    equal(r.measured, null, 'no spans: nothing measured');
  }
  // PowerSGD without the config: estimated, and said so.
  const psgd = makePlan({ dp: 2, compress: parseCompressPolicy('dp=powersgd:2') });
  equal(compressionBytes({ plan: psgd, model: MODEL, steps: 1 })[0].exact, false);
  deepStrictEqual(compressionBytes({ plan: makePlan({ dp: 2 }), model: MODEL, steps: 1 }), [], 'no policy: no figures');
});

Deno.test('compression figures: measured bytes are the sends inside steps by their group’s dimension', () => {
  const plan = makePlan({ dp: 2, tp: 2, compress: parseCompressPolicy('naive:bf16') });
  const spans = [send(0, 'dp[0,2]', 100, 0), send(1, 'tp[0,1]', 40, 0), send(2, 'world', 8, 1), send(0, 'world', 1000)];
  spans.push({ ...send(0, 'dp[0,2]', 5000, 0), kind: 'recv' });
  const got = Object.fromEntries(
    compressionBytes({ plan, model: MODEL, steps: 2 }, spans).map((r) => [r.dim, r.measured]),
  );
  deepStrictEqual(got, { dp: 108, tp: 40 });
  // A trace without step marks (read back from trace.json) counts every send.
  const unmarked = spans.map(({ step: _, ...s }) => s as Span);
  const all = Object.fromEntries(
    compressionBytes({ plan, model: MODEL, steps: 2 }, unmarked).map((r) => [r.dim, r.measured]),
  );
  deepStrictEqual(all, { dp: 1108, tp: 40 });
});
