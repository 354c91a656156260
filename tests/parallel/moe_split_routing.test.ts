/**
 * Why a MoE run under dp (any ZeRO stage) drifts from the single-rank run (docs/design.md#moe-under-dp-and-zero):
 * each rank routes its rows as one token group with its own capacity, the
 * single-rank run the whole micro-batch. The single-rank Trainer trains the same model twice,
 * routing in one group and in two (as dp 2 does; tests/parallel/moe_zero.test.ts checks that the
 * mesh trainer matches the latter), and every MoE forward's choices and slots are read back:
 * a flipped choice (another expert picked) and a dropped one (kept by one routing, dropped by the
 * other) are counted per step. Losses agree to float rounding for as long as both counts are 0,
 * and part once one is not; with the same weights (step 0) nothing flips and the drops are the
 * count the run's log reports (src/parallel/expert/moe_routing.ts).
 */
import { equal, ok } from 'node:assert/strict';
import { gpuTest } from '../util/gpu.ts';
import { TEXT, tinyConfig } from './harness.ts';
import { epData } from './ep_harness.ts';
import { createMoEModel } from '../../src/models/registry.ts';
import type { MoELanguageModel } from '../../src/models/moe_layer.ts';
import { Trainer } from '../../src/train/trainer.ts';
import { choiceDemand, splitRouting } from '../../src/parallel/expert/moe_routing.ts';
import type { Gpu } from '../../src/gpu/context.ts';
import type { TrainConfig } from '../../src/train/config.ts';

interface Routed {
  losses: number[];
  /** Per step, per MoE forward: the (N, k) chosen experts and their slots (−1 = dropped). */
  steps: { top: Int32Array; slot: Int32Array }[][];
}

/** Trains `over` on the single-rank Trainer routing in `groups` token groups, reading every forward's routing back. */
async function routedRun(gpu: Gpu, over: Partial<TrainConfig>, groups: number): Promise<Routed> {
  const { cfg, vocabSize, data } = epData({ cfg: over, text: TEXT });
  const model = createMoEModel(gpu, cfg, vocabSize, { groups }) as MoELanguageModel;
  const trainer = new Trainer(gpu, model, data, cfg);
  const steps: Routed['steps'] = [];
  try {
    for (let s = 0; s < cfg.steps; s++) {
      const reads: Promise<[ArrayLike<number>, ArrayLike<number>]>[] = [];
      model.moeLayers.onRoute = (_, r) => reads.push(Promise.all([gpu.read(r.top), gpu.read(r.slot)]));
      await trainer.step(s);
      model.moeLayers.onRoute = null;
      steps.push((await Promise.all(reads)).map(([t, sl]) => ({ top: Int32Array.from(t), slot: Int32Array.from(sl) })));
    }
    return { losses: (await trainer.drain()).map((r) => r.loss), steps };
  } finally {
    model.params.destroy();
  }
}

/** Per step: choices that picked another expert, and same choices kept by one run and dropped by the other. */
function compare(a: Routed, b: Routed): { flipped: number; dropped: number }[] {
  return a.steps.map((calls, s) => {
    let flipped = 0, dropped = 0;
    calls.forEach(({ top, slot }, i) => {
      const o = b.steps[s][i];
      for (let q = 0; q < top.length; q++) {
        if (top[q] !== o.top[q]) flipped++;
        else if ((slot[q] < 0) !== (o.slot[q] < 0)) dropped++;
      }
    });
    return { flipped, dropped };
  });
}

const rel = (a: number, b: number) => Math.abs(a - b) / Math.abs(b);

for (const [arch, k] of [['gpt-moe', 1], ['mamba-moe', 2]] as const) {
  const base = { arch, nEmbd: 16, nExpert: 4, moeTopK: k, moeEvery: 1, auxLossWeight: 0, steps: 6 };

  gpuTest(
    `${arch} top-${k}: a capacity that binds routes two groups differently; losses part exactly there`,
    async (gpu) => {
      const over = tinyConfig({ ...base, capacityFactor: 1 });
      const [one, two] = [await routedRun(gpu, over, 1), await routedRun(gpu, over, 2)];
      const diff = compare(one, two);
      // Step 0, the same weights: the same choices; the drops are what the run's log counts from the groups' demand.
      equal(diff[0].flipped, 0, 'no choice flips under the same weights');
      const tokens = one.steps[0][0].top.length / k / 2;
      const counted = two.steps[0].map(({ top }) =>
        splitRouting(
          [0, 1].map((g) => choiceDemand(top.subarray(g * tokens * k, (g + 1) * tokens * k), 4, k)),
          tokens,
          4,
          k,
          1,
        )
          .differ
      ).reduce((x, y) => x + y, 0);
      equal(diff[0].dropped, counted, 'dropped differently at step 0 = splitRouting of the groups');
      const first = diff.findIndex((d) => d.flipped + d.dropped > 0);
      ok(first >= 0, `capacity factor 1 drops some choice differently: ${JSON.stringify(diff)}`);
      for (let s = 0; s < first; s++) {
        ok(rel(two.losses[s], one.losses[s]) < 1e-6, `step ${s}: losses ${two.losses[s]} vs ${one.losses[s]}`);
      }
      ok(
        two.losses.slice(first).some((l, i) => rel(l, one.losses[first + i]) > 1e-5),
        `losses part once step ${first} routes differently: ${two.losses} vs ${one.losses}`,
      );
    },
  );

  gpuTest(`${arch} top-${k}: with room for every choice nothing flips or drops, and the losses agree`, async (gpu) => {
    // Capacity ⌈(E/k)·k·tokens/E⌉ = every token of the group: nothing can be dropped.
    const over = tinyConfig({ ...base, capacityFactor: 4 / k });
    const [one, two] = [await routedRun(gpu, over, 1), await routedRun(gpu, over, 2)];
    for (const [s, d] of compare(one, two).entries()) {
      equal(d.flipped + d.dropped, 0, `step ${s}: ${JSON.stringify(d)}`);
      ok(rel(two.losses[s], one.losses[s]) < 1e-6, `step ${s}: losses ${two.losses[s]} vs ${one.losses[s]}`);
    }
  });
}
