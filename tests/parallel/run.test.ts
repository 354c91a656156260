/**
 * src/parallel/run/run.ts in one thread (localWorld: every rank's Communicator and its own GPU
 * device in this process): the dispatch, the batch convention, and that every rank's measured
 * elements per `dim/collective` equal the prediction (cost.ts stepTraffic for the trainer,
 * scalar collectives included), every predicted row being exact — and so does what the
 * merged trace (trace.json's Chrome trace) records per rank and step (trace_bytes.ts).
 */
import { deepStrictEqual, equal, ok, throws } from 'node:assert/strict';
import { parseConfig, type TrainConfig } from '../../src/train/config.ts';
import { makePlan, type ParallelPlan } from '../../src/parallel/plan/plan.ts';
import { type RankSummary, strategyOf, trainerConfig } from '../../src/parallel/run/run.ts';
import { TEST, tracedRun, traceMismatches } from './trace_harness.ts';

/** 2 steps of `plan` through trainRank; also checks the merged trace accounts for every rank's sends exactly. */
async function run(plan: ParallelPlan, over: Partial<TrainConfig> = {}): Promise<RankSummary[]> {
  const { ranks, trace } = await tracedRun(plan, over);
  deepStrictEqual(traceMismatches(ranks, trace), [], 'trace.json elements per step = meter = stepTraffic');
  return ranks;
}

/** Measured minus predicted per `dim/collective`, over the keys whose predicted rows are all exact. */
function exactMismatches(s: RankSummary): string[] {
  const pred = new Map<string, { n: number; exact: boolean }>();
  for (const r of s.predicted) {
    const k = `${r.dim}/${r.collective}`, p = pred.get(k) ?? { n: 0, exact: true };
    pred.set(k, { n: p.n + r.elements, exact: p.exact && r.exact });
  }
  const out: string[] = [];
  for (const rec of s.records) {
    for (const k of new Set([...pred.keys(), ...Object.keys(rec.byDim)])) {
      const p = pred.get(k);
      if (p && !p.exact) continue;
      if ((p?.n ?? 0) !== (rec.byDim[k] ?? 0)) {
        out.push(`rank ${s.rank} step ${rec.step} ${k}: predicted ${p?.n ?? 0}, measured ${rec.byDim[k] ?? 0}`);
      }
    }
  }
  return out;
}

Deno.test('strategyOf: the mesh trainer for every split model, dp / ZeRO / ep over data parallelism, and refuses the rest by name', () => {
  equal(strategyOf(makePlan({ dp: 2 }), 'gpt'), 'mesh', 'data parallelism alone runs on the mesh trainer');
  equal(strategyOf(makePlan({ dp: 2, zero: 2 }), 'gpt'), 'mesh', 'ZeRO is a gradient-sync mode of the mesh trainer');
  for (
    const p of [{ tp: 2, sp: true }, { pp: 2 }, { cp: 2 }, { dp: 2, pp: 2, tp: 2 }, { dp: 2, cp: 2 }, {
      dp: 2,
      tp: 2,
      zero: 1,
    }] as const
  ) equal(strategyOf(makePlan(p), 'gpt'), 'mesh', JSON.stringify(p));
  equal(strategyOf(makePlan({ dp: 2, ep: 2 }), 'gpt-moe'), 'mesh', 'the mesh runs expert parallelism');
  equal(strategyOf(makePlan({ dp: 2, tp: 2, zero: 2 }), 'gpt'), 'mesh', 'ZeRO-2/3 shard a tp shard (zero_sync.ts)');
  equal(strategyOf(makePlan({ dp: 2, pp: 2, zero: 3 }), 'gpt'), 'mesh', 'ZeRO-3 shards each pipeline stage');
  const interleaved = makePlan({ dp: 2, pp: 2, zero: 3, schedule: 'interleaved', virtualStages: 2 });
  equal(strategyOf(interleaved, 'gpt'), 'mesh', 'and under the interleaved schedule (zero_sync.ts per stage)');
  equal(strategyOf(makePlan({ dp: 4, ep: 2, zero: 3 }), 'gpt-moe'), 'mesh', 'ZeRO shards experts over their edp group');
  equal(strategyOf(makePlan({ tp: 2 }), 'mamba'), 'mesh', 'mamba splits its inner channels');
  equal(strategyOf(makePlan({ pp: 2, tp: 2 }), 'mamba'), 'mesh');
  equal(strategyOf(makePlan({ tp: 2 }), 'linear'), 'mesh', 'linear splits its heads');
  equal(strategyOf(makePlan({ tp: 2, sp: true }), 'linear'), 'mesh', 'linear under sp: a halo row per token shift');
  equal(strategyOf(makePlan({ tp: 2, sp: true }), 'gpt-moe'), 'mesh', 'MoE under sp: a token group per tp rank');
  throws(() => strategyOf(makePlan({ cp: 2 }), 'hybrid'), /cp 2 does not apply to --arch hybrid/);
  throws(() => strategyOf(makePlan({ dp: 2, ep: 2 }), 'gpt'), /gpt-moe/);
});

Deno.test('trainerConfig keeps the global batch G, in the plan micro-batches of G/m, for every trainer', () => {
  const cfg = parseConfig({ batchSize: 4, gradAccum: 2 });
  const dp = trainerConfig(makePlan({ dp: 2, microBatches: 4 }), cfg);
  deepStrictEqual([dp.batchSize, dp.gradAccum], [2, 4]);
  const pp = trainerConfig(makePlan({ pp: 2, microBatches: 4 }), cfg);
  deepStrictEqual([pp.batchSize, pp.gradAccum], [2, 4]);
  const same = trainerConfig(makePlan({ pp: 2, microBatches: 2 }), cfg);
  deepStrictEqual([same.batchSize, same.gradAccum], [4, 2], 'micro-batches = gradAccum: the config itself');
});

Deno.test({
  name:
    'dp 2 and pp 2 in one thread: measured and traced traffic equal the prediction, losses finite, val loss on rank 0 of dp',
  ...TEST,
  fn: async () => {
    const dp = await run(makePlan({ dp: 2, microBatches: 2 }), { batchSize: 2, gradAccum: 2 });
    deepStrictEqual(dp.flatMap(exactMismatches), []);
    deepStrictEqual(dp.flatMap((s) => s.predicted.filter((r) => !r.exact)), [], 'every dp row is exact');
    ok(dp[0].records.every((r) => Number.isFinite(r.loss) && r.byDim['dp/allReduce'] > 0));
    ok(Number.isFinite(dp[0].records[1].valLoss) && dp[1].records[1].valLoss === undefined);
    equal(dp[0].records[0].loss, dp[1].records[0].loss);
    ok(dp[0].memory.optimizer === 2 * dp[0].memory.params && dp[0].memory.peakPool > 0);
    const pp = await run(makePlan({ pp: 2, microBatches: 2 }));
    deepStrictEqual(pp.flatMap(exactMismatches), []);
    ok(pp[0].records[0].byDim['pp/send'] > 0 && pp[1].records[0].byDim['pp/send'] > 0);
    deepStrictEqual(pp.flatMap((s) => s.predicted.filter((r) => !r.exact)), [], 'every pp row is exact');
    ok(
      pp.every((s) =>
        s.kind === 'mesh' && s.predicted.some((r) => r.what === 'gradient norm + loss over the world' && r.n === 2)
      ),
      "the mesh's [norm, loss] sum is predicted by stepTraffic",
    );
  },
});
