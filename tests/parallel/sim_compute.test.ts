/**
 * The simulated clock's compute (src/parallel/mesh/sim_compute.ts): a rank's trainer prices each forward and backward
 * with the `priceActions` its caller passes (src/perf/action_prices.ts `simActionUs` in the worker and the MPI host,
 * since src/perf sits above src/parallel), and refuses a network model with a peak when none was passed.
 */
import { equal, ok, throws } from 'node:assert/strict';
import { closeLocalWorld, localWorld } from '../../src/comm/local.ts';
import { parseConfig } from '../../src/train/config.ts';
import { TextDataset } from '../../src/data/dataset.ts';
import { CharTokenizer } from '../../src/data/tokenizer.ts';
import { makePlan } from '../../src/parallel/plan/plan.ts';
import { MeshTrainer } from '../../src/parallel/mesh/mesh_trainer.ts';
import type { ActionUs, PriceActions } from '../../src/parallel/mesh/sim_compute.ts';
import { simActionUs } from '../../src/perf/action_prices.ts';
import { gpuTest } from '../util/gpu.ts';
import { TEXT, tinyConfig } from './harness.ts';
import { microConfig } from './mesh_rank.ts';

const NET = 'link=10GB/s,1us;peak=50';

gpuTest('a peak charges each action at the prices passed in, and is refused without them', async (gpu) => {
  const plan = makePlan({ microBatches: 2 });
  const cfg = parseConfig(microConfig(plan, tinyConfig({ steps: 1 }))), tok = CharTokenizer.fromText(TEXT);
  const data = new TextDataset(tok.encode(TEXT), cfg.blockSize);
  const [c] = localWorld(1, { net: NET });
  try {
    throws(() => new MeshTrainer(gpu, cfg, plan, c, data, tok.vocabSize), /peak=50 GFLOP\/s .*priceActions/);
    // One stage: every action is the last stage's (the LM head's), m = 2 micro-batches of each.
    const prices: ActionUs = { mid: { forward: 1, backward: 2 }, last: { forward: 30_000, backward: 70_000 } };
    const calls: number[] = [];
    const price: PriceActions = (_cfg, _plan, _v, peak) => (calls.push(peak), prices);
    const t = new MeshTrainer(gpu, cfg, plan, c, data, tok.vocabSize, { priceActions: price });
    const t0 = c.transport.clock.now;
    await t.step(0);
    const moved = c.transport.clock.now - t0, charged = 2 * (30_000 + 70_000);
    equal(calls.join(), '50');
    ok(moved >= charged && moved < charged + 1_000, `clock moved ${moved} µs; the actions charge ${charged}`);
    t.destroy();
  } finally {
    closeLocalWorld([c]);
  }
});

Deno.test('simActionUs: positive µs, the last stage (with the LM head) dearer, halved at twice the peak', () => {
  const plan = makePlan({ pp: 2, microBatches: 2 });
  const cfg = parseConfig(microConfig(plan, tinyConfig()));
  const at = (peak: number) => simActionUs(cfg, plan, 65, peak);
  const a = at(10), b = at(20);
  for (const x of [a.mid, a.last]) ok(x.forward > 0 && x.backward > x.forward, JSON.stringify(x));
  ok(a.last.forward > a.mid.forward, JSON.stringify(a));
  const rel = (x: number, y: number) => Math.abs(x - y) / y;
  ok(
    rel(b.mid.forward * 2, a.mid.forward) < 1e-9 && rel(b.last.backward * 2, a.last.backward) < 1e-9,
    JSON.stringify(b),
  );
});
