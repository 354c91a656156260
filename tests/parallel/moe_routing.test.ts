/**
 * The count of MoE choices a split run routes differently (src/parallel/expert/moe_routing.ts) against
 * the slot assignment itself: src/reference/moe.ts assignSlotsRef (checked against the GPU kernel
 * in tests/kernels/moe.test.ts) run on the same choices as G groups and as one group, every choice
 * kept by one and dropped by the other counted one by one. Skewed choices so that capacity binds.
 */
import { deepStrictEqual, equal, ok } from 'node:assert/strict';
import { assertThrows, rng } from '../util/assert.ts';
import { slotPlan } from '../../src/kernels/moe.ts';
import { assignSlotsRef } from '../../src/reference/moe.ts';
import { choiceDemand, combineRouting, type RankRouting, splitRouting } from '../../src/parallel/expert/moe_routing.ts';

/** top (n, k): distinct experts per token, expert 0 drawn most often (so it overflows first). */
function skewedTop(n: number, e: number, k: number, seed: number): Int32Array {
  const r = rng(seed), top = new Int32Array(n * k);
  for (let t = 0; t < n; t++) {
    const key = [...Array(e).keys()].map((x) => r() + (x === 0 ? 0.5 : 0));
    const order = [...Array(e).keys()].sort((a, b) => key[b] - key[a]);
    for (let j = 0; j < k; j++) top[t * k + j] = order[j];
  }
  return top;
}

/** Choices kept by one routing and dropped by the other, and the drops of each: from the slots themselves. */
function byTokens(top: Int32Array, n: number, e: number, k: number, groups: number, cf: number) {
  const split = assignSlotsRef(top, slotPlan(n, e, k, groups, cf, 1, 1)).slot;
  const whole = assignSlotsRef(top, slotPlan(n, e, k, 1, cf, 1, 1)).slot;
  let differ = 0, droppedSplit = 0, droppedWhole = 0;
  for (let q = 0; q < n * k; q++) {
    if ((split[q] < 0) !== (whole[q] < 0)) differ++;
    if (split[q] < 0) droppedSplit++;
    if (whole[q] < 0) droppedWhole++;
  }
  return { assignments: n * k, differ, droppedSplit, droppedWhole };
}

Deno.test('splitRouting counts exactly the choices the per-group capacity keeps or drops otherwise than one group', () => {
  let some = 0;
  for (const [n, e, k, groups, cf] of [[64, 4, 1, 2, 1.25], [96, 4, 2, 2, 1.25], [90, 5, 2, 3, 1], [64, 8, 2, 4, 2]]) {
    for (let seed = 1; seed <= 5; seed++) {
      const top = skewedTop(n, e, k, seed), gs = n / groups;
      const demands = [...Array(groups).keys()].map((g) =>
        choiceDemand(top.subarray(g * gs * k, (g + 1) * gs * k), e, k)
      );
      const want = byTokens(top, n, e, k, groups, cf);
      deepStrictEqual(
        splitRouting(demands, gs, e, k, cf),
        want,
        `n ${n} E ${e} k ${k} G ${groups} cf ${cf} seed ${seed}`,
      );
      some += want.differ;
    }
  }
  ok(some > 0, 'the skewed choices make the two routings differ somewhere');
  // Capacity E/k × the tokens: nothing is ever dropped, so nothing differs.
  const top = skewedTop(64, 4, 2, 7);
  const d = [0, 1].map((g) => choiceDemand(top.subarray(g * 64, (g + 1) * 64), 4, 2));
  deepStrictEqual(splitRouting(d, 32, 4, 2, 2), { assignments: 128, differ: 0, droppedSplit: 0, droppedWhole: 0 });
});

Deno.test('combineRouting sums the blocks and micro-batches of every rank, and refuses a missing or repeated group', () => {
  const cfg = { nExpert: 2, moeTopK: 1 as const, capacityFactor: 1 };
  // Group 0 sends its 4 tokens to expert 0, group 1 to expert 1: the split drops 2 + 2, one group (capacity 4) none.
  const rank = (group: number, demand: number[]): RankRouting => ({
    group,
    groups: 2,
    tokens: 4,
    calls: [{ layer: 0, micro: 0, demand }, { layer: 1, micro: 0, demand }],
  });
  deepStrictEqual(combineRouting([rank(0, [4, 0]), rank(1, [0, 4]), undefined], cfg), {
    assignments: 16,
    differ: 8,
    droppedSplit: 8,
    droppedWhole: 0,
  });
  equal(combineRouting([undefined, undefined], cfg), undefined);
  assertThrows(() => combineRouting([rank(0, [4, 0])], cfg), 'block 0 micro-batch 0 misses group(s) 1');
  assertThrows(() => combineRouting([rank(0, [4, 0]), rank(0, [4, 0])], cfg), 'has group 0 twice');
  assertThrows(() => splitRouting([[3, 0]], 4, 2, 1, 1), 'group 0 choice 0 sums to 3, not 4 tokens');
  assertThrows(() => choiceDemand([0, 2], 2, 1), 'expert 2 of choice 1 is outside 0…1');
});
