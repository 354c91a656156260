/**
 * Per-step traffic derived from the model (src/parallel/cost/derived_traffic.ts, docs/design.md#accounting-derived-from-the-model):
 * a counting rank (src/comm/counting.ts) counts what a running rank's meter measures, call by call; and one step of a
 * rank's real MeshTrainer over a meta GPU and a counting world gives, per dimension and collective, what cost.ts
 * stepTraffic gives for the plans the exact-traffic tests pin (arch_parity.test.ts, run against real ranks there),
 * every architecture's branch of it included: the recurrent blocks', recurrent depth's r iterations and MoE's
 * all-to-alls.
 */
import { deepStrictEqual, equal, rejects, throws } from 'node:assert/strict';
import { closeLocalWorld, localWorld } from '../../src/comm/local.ts';
import { countingWorld } from '../../src/comm/counting.ts';
import type { Communicator } from '../../src/comm/communicator.ts';
import { TrafficMeter } from '../../src/parallel/mesh/traffic.ts';
import { parseConfig, type TrainConfig } from '../../src/train/config.ts';
import { makePlan, type ParallelPlan, planWorldSize } from '../../src/parallel/plan/plan.ts';
import { derivedStepTraffic } from '../../src/parallel/cost/derived_traffic.ts';
import { sentByDim } from '../../src/parallel/cost/rank_traffic.ts';
import { stepTraffic, trafficByKind } from '../../src/parallel/cost/cost.ts';
import { derivedTraffic } from '../../src/parallel/cost/derived_rows.ts';
import { planModelOf } from '../../src/parallel/run/run.ts';
import { microConfig } from './mesh_rank.ts';
import { tinyConfig } from './harness.ts';

/** The same calls on every rank of a group of 3: each reducing and gathering collective, ragged sizes, and a p2p ring. */
async function calls(world: Communicator): Promise<void> {
  const g = world.newGroup([0, 1, 2], 'tp[0,1,2]'), r = world.rank;
  await g.allReduce(new Float32Array(13));
  await g.reduceScatter(new Float32Array(21), { op: 'avg' });
  await g.allGather(new Int32Array(5));
  await g.allToAll(new Float32Array(12));
  await g.broadcast(new Float32Array(7), 2);
  await g.reduce(new Float32Array(9), 1);
  await g.send(new Float32Array(4 + r), (r + 1) % 3);
  await g.recv(new Float32Array(4 + ((r + 2) % 3)), (r + 2) % 3);
}

Deno.test('a counting rank counts, per group/op, what a running rank of a local world sends', async () => {
  const world = localWorld(3), meters = world.map((c) => TrafficMeter.of(c));
  try {
    await Promise.all(world.map(calls));
  } finally {
    closeLocalWorld(world);
  }
  for (let r = 0; r < 3; r++) {
    const counting = countingWorld(r, 3);
    await calls(counting.world);
    const measured = meters[r].take();
    deepStrictEqual(counting.take(), measured, `rank ${r}: counted = measured`);
    equal(measured['tp[0,1,2]:p2p/send'], 4 + r, `rank ${r}: its p2p send`);
    deepStrictEqual(counting.take(), {}, 'take starts again from zero');
  }
});

Deno.test('a counting rank refuses a collective that runs message by message, naming the call', async () => {
  const counting = countingWorld(0, 2), g = counting.world.newGroup([0, 1], 'dp[0,1]');
  await rejects(
    g.allReduce(new Float32Array(4), { backend: 'ours' }),
    /allReduce in group dp\[0,1\] waited for rank 1/,
  );
});

/** GPT plans of arch_parity.test.ts, cost.test.ts and ep_mesh.test.ts: every branch of the analytical model, ZeRO's buckets included. */
const CASES: [Partial<TrainConfig>, Partial<ParallelPlan>][] = [
  [{ nEmbd: 16 }, { tp: 2 }],
  [{ nEmbd: 16, recompute: 'full' }, { cp: 2, tp: 2, sp: true }],
  [{ nEmbd: 16, recompute: 'selective' }, { cp: 2, microBatches: 2 }],
  [{ nEmbd: 16, nHead: 4 }, { cp: 2, cpKind: 'ulysses', tp: 2 }],
  [{ nEmbd: 16, nLayer: 4 }, { pp: 2, schedule: 'interleaved', virtualStages: 2, microBatches: 2 }],
  [{ nEmbd: 16, nLayer: 4 }, { pp: 2, dp: 2, tp: 2, microBatches: 2 }],
  [{ nEmbd: 16 }, { dp: 2, zero: 3, tp: 2, sp: true }],
  [{ nEmbd: 16, nLayer: 4 }, { dp: 2, pp: 2, zero: 2, microBatches: 2 }],
  [{ arch: 'gpt-moe', nEmbd: 16, nExpert: 4, moeEvery: 2 }, { dp: 4, ep: 2 }],
  [{ arch: 'gpt-moe', nEmbd: 16, nExpert: 4 }, { dp: 2, ep: 2, tp: 2, sp: true }],
  [{ arch: 'gpt-moe', nEmbd: 16, nExpert: 4 }, { dp: 4, ep: 2, zero: 2 }],
];

Deno.test('traffic counted from the model = the analytical model of a GPT of its shape, per dimension and collective, every rank', async () => {
  const V = 11;
  for (const [arch, over] of CASES) {
    const plan = makePlan(over), what = `${JSON.stringify(arch)} ${JSON.stringify(over)}`;
    const cfg = parseConfig(microConfig(plan, tinyConfig(arch)));
    const { nLayer, nHead, nEmbd, blockSize, batchSize, nExpert, moeEvery } = cfg;
    const shape = {
      nLayer,
      nHead,
      nEmbd,
      blockSize,
      batchSize: batchSize * cfg.gradAccum,
      vocabSize: V,
      ...(cfg.arch === 'gpt-moe' && { nExpert, moeEvery }),
    };
    for (let r = 0; r < planWorldSize(plan); r++) {
      const d = await derivedStepTraffic(cfg, plan, V, r), rows = await derivedTraffic(cfg, plan, V, r);
      deepStrictEqual(sentByDim(d.sent), Object.fromEntries(trafficByKind(rows)), `${what} rank ${r}: rows = counts`);
      const analytic = stepTraffic(plan, shape, r, {
        ...(d.zero && { buckets: d.zero.buckets, expertBuckets: d.zero.expertBuckets, spBuckets: d.zero.spBuckets }),
        bias: cfg.bias,
        topK: cfg.moeTopK,
        capacityFactor: cfg.capacityFactor,
        moeEvery,
        trainer: 'mesh',
        recompute: cfg.recompute,
      });
      deepStrictEqual(analytic.filter((x) => !x.exact).map((x) => x.what), [], `${what}: every analytical row exact`);
      deepStrictEqual(
        Object.fromEntries(trafficByKind(rows)),
        Object.fromEntries(trafficByKind(analytic)),
        `${what} rank ${r}`,
      );
    }
  }
});

Deno.test('the analytical model refuses a plan model of another architecture, naming where its traffic is counted', () => {
  const cfg = parseConfig(tinyConfig({ arch: 'mamba', nEmbd: 16, dState: 4, expand: 2, dConv: 4 })),
    plan = makePlan({ tp: 2 });
  throws(() => stepTraffic(plan, planModelOf(plan, cfg, 11), 0), /not --arch mamba.*derivedTraffic/);
});
