/**
 * Expert parallelism on 2 simulated ranks (module workers with their own lavapipe devices)
 * against the single-rank Trainer on the same global batch, the single-rank MoE routing the
 * tokens in 2 groups (each EP rank routes its own rows as one group): losses within 1e-4
 * relative for 10 steps, step-0 gradients within RMS 5e-3, parameters after 10 steps within
 * 1e-4 + 1e-3·|ref|, and the elements each rank sends per step equal to the exact formula:
 *   allToAll: 4·L_moe·gradAccum·(ep−1)/ep·E·cap·C with cap = ⌈capacityFactor·topK·(B/ep)·T/E⌉
 *   allReduce: ring allReduce of Ψ_dense (dense gradients, router included) + 2 × 1 element
 *     (the loss average and the expert gradient norm)
 * which is cost.ts stepTraffic (dp + ep rows) plus the 1-element norm allReduce.
 */
import { deepStrictEqual, equal, ok } from 'node:assert/strict';
import { testGpu } from '../util/gpu.ts';
import { assertClose, assertRelRms, assertThrows } from '../util/assert.ts';
import { maxRel, ringAllReduceSent, TEXT, WORKER_TEST } from './harness.ts';
import { type EpArgs, type EpResult, epReference, withEpWorld } from './ep_harness.ts';
import { allToAllFromExperts, allToAllToExperts, expertParallelGroup, expertShard } from '../../src/parallel/expert_parallel.ts';
import { closeLocalWorld, localWorld, onEveryRank } from '../../src/dist/local.ts';
import { stepTraffic } from '../../src/parallel/cost.ts';
import { makePlan } from '../../src/parallel/plan.ts';
import { parseConfig } from '../../src/train/config.ts';
import { CharTokenizer } from '../../src/data/tokenizer.ts';

const RUNS: EpArgs[] = [
  // top-2 with capacity 1: tokens are dropped on both sides.
  { cfg: { nLayer: 2, nHead: 2, nEmbd: 32, blockSize: 16, batchSize: 4, steps: 10, warmup: 2, lr: 1e-2, minLr: 1e-3, gradClip: 0.5, logInterval: 10 }, moe: { nExpert: 4, topK: 2, capacityFactor: 1, auxLossWeight: 0.01, moeEvery: 1 }, text: TEXT },
  // top-1, MoE in block 1 only, two micro-batches per step.
  { cfg: { nLayer: 2, nHead: 2, nEmbd: 32, blockSize: 16, batchSize: 4, steps: 10, warmup: 2, lr: 1e-2, minLr: 1e-3, gradClip: 0.5, logInterval: 10, gradAccum: 2 }, moe: { nExpert: 4, topK: 1, capacityFactor: 1.25, auxLossWeight: 0.01, moeEvery: 2 }, text: TEXT },
];

Deno.test({
  name: 'ep2 matches the single-rank MoE run (losses, gradients, parameters); allToAll and allReduce traffic are exact',
  ...WORKER_TEST,
  fn: async () => {
    const gpu = await testGpu();
    const refs: Awaited<ReturnType<typeof epReference>>[] = [];
    for (const a of RUNS) refs.push(await epReference(gpu, a, 2));
    // Not vacuous: routing all 64 tokens as one group (capacity and balance over the whole batch) gives other losses.
    const oneGroup = await epReference(gpu, RUNS[0], 1);
    ok(maxRel(oneGroup.losses, refs[0].losses) > 1e-3, `groups matter: ${oneGroup.losses} vs ${refs[0].losses}`);
    await withEpWorld(2, async (w) => {
      for (const [i, args] of RUNS.entries()) {
        const res = await w.run<EpResult>('train', args);
        const ref = refs[i];
        const what = `ep2 top-${args.moe.topK} moeEvery ${args.moe.moeEvery}`;
        for (const r of res) {
          ok(maxRel(r.losses, ref.losses) < 1e-4, `${what}: losses ${r.losses} vs ${ref.losses}`);
          ok(maxRel(r.gradNorms, ref.gradNorms) < 1e-3, `${what}: grad norms ${r.gradNorms} vs ${ref.gradNorms}`);
        }
        ok(ref.gradNorms.some((n) => n > 0.5), `clipping is active on some step: ${ref.gradNorms}`);
        // Gradients and final parameters: every name a rank holds (dense ones on both, each expert on its owner).
        const names = [...Object.keys(res[0].grads0), ...Object.keys(res[1].grads0).filter((n) => n.includes('.experts.'))];
        equal(new Set(names).size, Object.keys(ref.grads0).length, `${what}: the ranks together hold every parameter once`);
        const pick = (rec: (r: EpResult) => Record<string, Float32Array>, n: string) => rec(res.find((r) => n in rec(r))!)[n];
        const flat = (f: (n: string) => Float32Array) => Float32Array.from(names.flatMap((n) => [...f(n)]));
        assertRelRms(flat((n) => pick((r) => r.grads0, n)), flat((n) => ref.grads0[n]), `${what}: step-0 gradients`);
        assertClose(flat((n) => pick((r) => r.params, n)), flat((n) => ref.params[n]), `${what}: parameters after 10 steps`);
        for (const n of Object.keys(res[1].grads0).filter((x) => !x.includes('.experts.'))) {
          deepStrictEqual(res[1].grads0[n], res[0].grads0[n], `${what}: ${n} is averaged to the same value on both ranks`);
        }

        // Traffic, counted on the wire.
        const cfg = parseConfig(args.cfg);
        const { nExpert: E, topK, capacityFactor } = args.moe;
        const ep = 2, m = cfg.gradAccum, C = cfg.nEmbd, tokens = (cfg.batchSize / ep) * cfg.blockSize;
        const cap = Math.ceil((capacityFactor * topK * tokens) / E);
        const moeLayers = [...Array(cfg.nLayer).keys()].filter((l) => l % args.moe.moeEvery === args.moe.moeEvery - 1).length;
        const allToAll = 4 * moeLayers * m * ((ep - 1) / ep) * E * cap * C;
        const vocabSize = CharTokenizer.fromText(TEXT).vocabSize;
        for (const [rank, r] of res.entries()) {
          const want = {
            'ep[0,1]/moe/allToAll': allToAll,
            'ep[0,1]/grads/allReduce': ringAllReduceSent(r.dense, ep, rank),
            'ep[0,1]/scalars/allReduce': 2 * ringAllReduceSent(1, ep, rank),
          };
          for (const sent of r.sent) deepStrictEqual(sent, want, `${what} rank ${rank}`);
          if (moeLayers === cfg.nLayer) {
            // cost.ts models every block as MoE; where that holds its rows give the same numbers.
            const rows = stepTraffic(makePlan({ dp: ep, ep }), { ...cfg, vocabSize, nExpert: E }, rank, { topK, capacityFactor, bias: cfg.bias });
            const total = rows.reduce((a, x) => a + x.elements, 0) + ringAllReduceSent(1, ep, rank);
            equal(total, Object.values(want).reduce((a, b) => a + b, 0), `${what} rank ${rank}: stepTraffic + the norm allReduce`);
            equal(rows.find((x) => x.dim === 'ep')!.elements, allToAll, 'cost.ts allToAll row');
          }
        }
      }
    });
  },
});

Deno.test('expert shards split the experts evenly and refuse what does not divide', () => {
  deepStrictEqual([0, 1, 2].map((i) => expertShard(6, 3, i)), [{ first: 0, count: 2 }, { first: 2, count: 2 }, { first: 4, count: 2 }]);
  assertThrows(() => expertShard(6, 4, 0), 'ep 4 must divide the 6 experts');
  assertThrows(() => expertShard(6, 3, 3), 'rank index 3 is outside 0 … 2');
});

Deno.test('the dispatch all-to-all puts every slot on its expert\'s rank, and the combine all-to-all inverts it', async () => {
  const world = localWorld(2);
  try {
    // E = 4 over 2 ranks, cap 3, C 2, local blocks padded to 5 rows, expert blocks to 7.
    const g = { e: 4, ep: 2, cap: 3, c: 2, localRows: 5, expertRows: 7 };
    const value = (rank: number, e: number, row: number, col: number) => row < g.cap ? 1000 * rank + 100 * e + 10 * row + col + 1 : 0;
    const local = (rank: number) => Float32Array.from({ length: g.e * g.localRows * g.c }, (_, i) => value(rank, Math.floor(i / (g.localRows * g.c)), Math.floor(i / g.c) % g.localRows, i % g.c));
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
    for (const [rank, out] of back.entries()) deepStrictEqual(out, local(rank), `rank ${rank}: the round trip restores every slot`);
    assertThrows(() => expertParallelGroup(world[0], makePlan({ dp: 2, ep: 1 })), 'supported plans are ep = dp');
    equal(expertParallelGroup(world[0], makePlan({ dp: 2, ep: 2 })).id, 'ep[0,1]');
  } finally {
    closeLocalWorld(world);
  }
});
