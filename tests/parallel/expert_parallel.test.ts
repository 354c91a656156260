/**
 * Expert parallelism on simulated ranks (module workers with their own devices, the mesh
 * trainer) against the single-rank Trainer on the same micro-batches, the single-rank MoE
 * routing each micro-batch in dp token groups (each rank's rows one group): losses within 1e-4
 * relative for 10 steps, step-0 gradients within RMS 5e-3, parameters after 10 steps within
 * 1e-4 + 1e-3·|ref|, for gpt-moe and mamba-moe with ep = dp = 2 and for gpt-moe with dp 4 × ep 2
 * (experts replicated over the two EP groups). The elements each rank sends per step equal
 * the exact formula, and the traffic counted from the model (cost/derived_rows.ts):
 *   allToAll over ep: 4·L_moe·m·(ep−1)/ep·E·cap·C with cap = ⌈capacityFactor·topK·b·T/E⌉, b = B/dp rows
 *   ring allReduces: Ψ_dense over dp, this rank's Ψ_expert over the dp/ep ranks holding the same
 *     experts (none when ep = dp), and [‖g‖² share, loss share] (2 elements) over the world.
 */
import { deepStrictEqual, equal, ok } from 'node:assert/strict';
import { testGpu } from '../util/gpu.ts';
import { assertClose, assertRelRms, assertThrows } from '../util/assert.ts';
import { maxRel, ringAllReduceSent, TEXT, WORKER_TEST } from './harness.ts';
import { type EpArgs, epData, epPlan, epReference, type EpResult, withEpWorld } from './ep_harness.ts';
import { allToAllFromExperts, allToAllToExperts } from '../../src/parallel/expert/expert_exchange.ts';
import { expertShard } from '../../src/parallel/expert/expert_exchange.ts';
import { trainerConfig } from '../../src/parallel/run/run.ts';
import { derivedTraffic } from '../../src/parallel/cost/derived_rows.ts';
import { closeLocalWorld, localWorld, onEveryRank } from '../../src/comm/local.ts';
import { stepTraffic } from '../../src/parallel/cost/cost.ts';
import { makePlan, planGroup } from '../../src/parallel/plan/plan.ts';
import type { TrainConfig } from '../../src/train/config.ts';

const BASE: Partial<TrainConfig> = {
  nLayer: 2,
  nHead: 2,
  nEmbd: 32,
  blockSize: 16,
  batchSize: 4,
  steps: 10,
  warmup: 2,
  lr: 1e-2,
  minLr: 1e-3,
  gradClip: 0.5,
  logInterval: 10,
};
const run = (over: Partial<TrainConfig>, ep?: number): EpArgs => ({
  cfg: { ...BASE, nExpert: 4, auxLossWeight: 0.01, ...over },
  text: TEXT,
  ep,
});

const EP2: EpArgs[] = [
  // top-2 with capacity 1: tokens are dropped on both sides.
  run({ arch: 'gpt-moe', moeTopK: 2, capacityFactor: 1, moeEvery: 1 }),
  // top-1, MoE in block 1 only, two micro-batches per step.
  run({ arch: 'gpt-moe', moeTopK: 1, capacityFactor: 1.25, moeEvery: 2, gradAccum: 2 }),
  // MoE-Mamba: a MoE sub-layer after both Mamba mixers, top-2 with drops.
  run({ arch: 'mamba-moe', moeTopK: 2, capacityFactor: 1, moeEvery: 1 }),
];
// dp 4 × ep 2: two EP groups [0,1] and [2,3], experts {0,1} on ranks 0 and 2, {2,3} on 1 and 3.
const DP4_EP2 = run({ arch: 'gpt-moe', moeTopK: 2, capacityFactor: 1, moeEvery: 1, batchSize: 8 }, 2);

type Ref = Awaited<ReturnType<typeof epReference>>;

/** Every check of one run of `res.length` = dp ranks against the single-rank reference. */
async function checkRun(args: EpArgs, res: EpResult[], ref: Ref): Promise<void> {
  const { cfg, vocabSize } = epData(args);
  const dp = res.length, ep = args.ep ?? dp, plan = epPlan(args, dp);
  const what = `${cfg.arch} dp ${dp} ep ${ep} top-${cfg.moeTopK} moeEvery ${cfg.moeEvery}`;
  for (const r of res) {
    ok(maxRel(r.losses, ref.losses) < 1e-4, `${what}: losses ${r.losses} vs ${ref.losses}`);
    ok(maxRel(r.gradNorms, ref.gradNorms) < 1e-3, `${what}: grad norms ${r.gradNorms} vs ${ref.gradNorms}`);
  }
  ok(ref.gradNorms.some((n) => n > 0.5), `clipping is active on some step: ${ref.gradNorms}`);
  // Gradients and final parameters: dense ones from rank 0, each expert from its owner in EP group 0.
  const isExpert = (n: string) => n.includes('.experts.');
  const names = [
    ...Object.keys(res[0].grads0),
    ...res.slice(1, ep).flatMap((r) => Object.keys(r.grads0).filter(isExpert)),
  ];
  equal(new Set(names).size, Object.keys(ref.grads0).length, `${what}: EP group 0 holds every parameter once`);
  const owner = (n: string) => res.slice(0, ep).find((r) => n in r.grads0)!;
  const flat = (f: (n: string) => Float32Array) => Float32Array.from(names.flatMap((n) => [...f(n)]));
  assertRelRms(flat((n) => owner(n).grads0[n]), flat((n) => ref.grads0[n]), `${what}: step-0 gradients`);
  assertClose(flat((n) => owner(n).params[n]), flat((n) => ref.params[n]), `${what}: parameters after 10 steps`);
  for (const [rank, r] of res.entries()) {
    for (const n of Object.keys(r.grads0)) {
      // Dense gradients agree on every rank; an expert's agree on the ranks holding it (rank mod ep).
      const twin = isExpert(n) ? res[rank % ep] : res[0];
      deepStrictEqual(r.grads0[n], twin.grads0[n], `${what}: ${n} is synchronised to the same value on rank ${rank}`);
    }
  }
  // Traffic, counted on the wire.
  const { nExpert: E, moeTopK: topK, capacityFactor, moeEvery } = cfg;
  const m = cfg.gradAccum, C = cfg.nEmbd, tokens = (cfg.batchSize / dp) * cfg.blockSize; // per micro-batch
  const cap = Math.ceil((capacityFactor * topK * tokens) / E);
  const moeLayers = [...Array(cfg.nLayer).keys()].filter((l) => l % moeEvery === moeEvery - 1).length;
  const allToAll = 4 * moeLayers * m * ((ep - 1) / ep) * E * cap * C;
  for (const [rank, r] of res.entries()) {
    const all = planGroup(plan, 'dp', rank),
      epRanks = planGroup(plan, 'ep', rank),
      edp = all.filter((d) => d % ep === rank % ep);
    const want: Record<string, number> = {
      [`ep[${epRanks}]/moe/allToAll`]: allToAll,
      [`dp[${all}]/grads/allReduce`]: ringAllReduceSent(r.dense, dp, rank),
      'world/scalars/allReduce': ringAllReduceSent(2, dp, rank),
    };
    if (edp.length > 1) {
      want[`edp[${edp}]/experts/allReduce`] = ringAllReduceSent(r.expert, edp.length, edp.indexOf(rank));
    }
    for (const sent of r.sent) deepStrictEqual(sent, want, `${what} rank ${rank}`);
    const rows = await derivedTraffic(trainerConfig(plan, cfg), plan, vocabSize, rank);
    equal(
      rows.reduce((a, x) => a + x.elements, 0),
      Object.values(want).reduce((a, b) => a + b, 0),
      `${what} rank ${rank}: derived traffic`,
    );
    equal(rows.find((x) => x.dim === 'ep')!.elements, allToAll, `${what}: the derived allToAll row`);
    equal(rows.find((x) => x.what === 'dense gradients')!.n, r.dense, `${what}: the planner's Ψ_dense`);
    equal(
      rows.find((x) => x.what === 'expert gradients')?.elements ?? 0,
      want[`edp[${edp}]/experts/allReduce`] ?? 0,
      `${what}: cost.ts expert-gradient row`,
    );
  }
}

Deno.test({
  name: 'ep2 (gpt-moe, mamba-moe) matches the single-rank MoE run (losses, gradients, parameters); traffic is exact',
  ...WORKER_TEST,
  fn: async () => {
    const gpu = await testGpu();
    const refs: Ref[] = [];
    for (const a of EP2) refs.push(await epReference(gpu, a, 2));
    // Not vacuous: routing all 64 tokens as one group (capacity and balance over the whole batch) gives other losses.
    const oneGroup = await epReference(gpu, EP2[0], 1);
    ok(maxRel(oneGroup.losses, refs[0].losses) > 1e-3, `groups matter: ${oneGroup.losses} vs ${refs[0].losses}`);
    await withEpWorld(2, async (w) => {
      for (const [i, args] of EP2.entries()) await checkRun(args, await w.run<EpResult>('train', args), refs[i]);
    });
  },
});

Deno.test({
  name: 'dp 4 × ep 2 (experts replicated over two EP groups) matches the single-rank gpt-moe run; traffic is exact',
  ...WORKER_TEST,
  fn: async () => {
    const gpu = await testGpu();
    const ref = await epReference(gpu, DP4_EP2, 4);
    await withEpWorld(4, async (w) => await checkRun(DP4_EP2, await w.run<EpResult>('train', DP4_EP2), ref));
  },
});

Deno.test('expert shards split the experts evenly and refuse what does not divide', () => {
  deepStrictEqual([0, 1, 2].map((i) => expertShard(6, 3, i)), [{ first: 0, count: 2 }, { first: 2, count: 2 }, {
    first: 4,
    count: 2,
  }]);
  assertThrows(() => expertShard(6, 4, 0), 'ep 4 must divide the 6 experts');
  assertThrows(() => expertShard(6, 3, 3), 'rank index 3 is outside 0 … 2');
});

Deno.test("the dispatch all-to-all puts every slot on its expert's rank, and the combine all-to-all inverts it", async () => {
  const world = localWorld(2);
  try {
    // E = 4 over 2 ranks, cap 3, C 2, local blocks padded to 5 rows, expert blocks to 7.
    const g = { e: 4, ep: 2, cap: 3, c: 2, localRows: 5, expertRows: 7 };
    const value = (rank: number, e: number, row: number, col: number) =>
      row < g.cap ? 1000 * rank + 100 * e + 10 * row + col + 1 : 0;
    const local = (rank: number) =>
      Float32Array.from(
        { length: g.e * g.localRows * g.c },
        (_, i) => value(rank, Math.floor(i / (g.localRows * g.c)), Math.floor(i / g.c) % g.localRows, i % g.c),
      );
    const there = await onEveryRank(world, (c) => allToAllToExperts(c, local(c.rank), g));
    for (const [rank, out] of there.entries()) {
      for (let l = 0; l < 2; l++) {
        for (let row = 0; row < g.expertRows; row++) {
          const src = Math.floor(row / g.cap), i = row % g.cap;
          const want = row < 2 * g.cap ? value(src, 2 * rank + l, i, 1) : 0;
          equal(out[(l * g.expertRows + row) * g.c + 1], want, `rank ${rank} expert ${2 * rank + l} row ${row}`);
        }
      }
    }
    const back = await onEveryRank(world, (c) => allToAllFromExperts(c, there[c.rank], g));
    for (const [rank, out] of back.entries()) {
      deepStrictEqual(out, local(rank), `rank ${rank}: the round trip restores every slot`);
    }
  } finally {
    closeLocalWorld(world);
  }
});

Deno.test('dp 4 × ep 2: EP groups are consecutive dp ranks; the planner syncs experts over the ranks holding the same ones', () => {
  const plan = makePlan({ dp: 4, ep: 2 });
  deepStrictEqual([0, 1, 2, 3].map((r) => planGroup(plan, 'ep', r)), [[0, 1], [0, 1], [2, 3], [2, 3]]);
  const model = { nLayer: 2, nHead: 2, nEmbd: 32, blockSize: 16, batchSize: 8, vocabSize: 65, nExpert: 4 };
  const experts = (r: number) =>
    stepTraffic(plan, model, r, { trainer: 'mesh' }).find((x) => x.what === 'expert gradients');
  deepStrictEqual([0, 1, 2, 3].map((r) => experts(r)!.group), [[0, 2], [1, 3], [0, 2], [1, 3]]);
  equal(
    stepTraffic(makePlan({ dp: 2, ep: 2 }), model, 0, { trainer: 'mesh' }).find((x) => x.what === 'expert gradients'),
    undefined,
  );
});
