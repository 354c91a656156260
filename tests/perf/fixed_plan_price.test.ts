/**
 * One pricing function: `npm run plan -- <degrees> --device P` prices a plan with the StepPrediction the search ranks
 * the same plan by (step_time.ts predictStep), for a `--model` spec and for the training flags' model alike.
 */
import { deepStrictEqual, equal, ok, throws } from 'node:assert/strict';
import { NetworkModel } from '../../src/comm/network.ts';
import { fixedPlanPrice, planFromArgs } from '../../src/cli/plan.ts';
import { DEVICE_PROFILES } from '../../src/perf/device_profile.ts';
import type { PlanModel } from '../../src/parallel/plan/plan.ts';
import { searchPlans } from '../../src/perf/plan_search.ts';
import { priceFixedPlan } from '../../src/perf/fixed_plan_price.ts';
import type { Recompute } from '../../src/models/recompute.ts';

/** The search's candidate with these degrees, from a search over `world` ranks of `model`. */
function searched(model: PlanModel, world: number, dtype: 'bf16' | 'f32', want: Record<string, unknown>, r: Recompute) {
  const s = searchPlans({
    model,
    world,
    dev: DEVICE_PROFILES['a100-80g'],
    net: NetworkModel.parse('pcie-eth'),
    dtype,
    attention: 'flash',
  });
  const c = s.ranked.find((c) =>
    c.recompute === r && Object.entries(want).every(([k, v]) => (c.plan as Record<string, unknown>)[k] === v)
  );
  ok(c, `the search ranks ${JSON.stringify(want)} with recompute ${r}`);
  return c;
}

const DEGREES = { dp: 2, tp: 2, pp: 1, cp: 1, zero: 1, sp: true, microBatches: 2, schedule: '1f1b' };
const FLAGS = ['--dp', '2', '--tp', '2', '--zero', '1', '--sp', '--micro-batches', '2', '--schedule', '1f1b'];
const PRICE = ['--device', 'a100-80g', '--net', 'pcie-eth'];

Deno.test('fixed plan: --model prices the plan with the StepPrediction the search gives it', async () => {
  const spec = 'layers=4,heads=4,hidden=256,seq=256,vocab=1024,batch=16';
  const argv = ['--model', spec, ...FLAGS, '--recompute', 'selective', '--precision', 'bf16-mixed', ...PRICE];
  const price = await fixedPlanPrice(argv);
  const { model } = await planFromArgs(argv);
  const c = searched(model, 4, 'bf16', DEGREES, 'selective');
  deepStrictEqual(price, c.prediction);
  // Another recompute mode is another price: the comparison above can tell the CLI's mode from the search's.
  ok(price!.step !== searched(model, 4, 'bf16', DEGREES, 'none').prediction.step);
});

Deno.test("fixed plan: the training flags' model (f32, recompute none) is priced as the search prices it", async () => {
  const shape = ['--n-layer', '2', '--n-head', '2', '--n-embd', '64', '--block-size', '32', '--batch-size', '8'];
  const argv = [...shape, '--vocab-size', '64', ...FLAGS, ...PRICE];
  const price = await fixedPlanPrice(argv);
  const { model } = await planFromArgs(argv);
  equal(model.nLayer, 2);
  equal(model.batchSize, 8);
  deepStrictEqual(price, searched(model, 4, 'f32', DEGREES, 'none').prediction);
  equal(await fixedPlanPrice(argv.slice(0, -PRICE.length)), undefined);
});

Deno.test('fixed plan: a MoE plan is refused by name, not priced as dense', async () => {
  const { plan, model } = await planFromArgs([
    ...['--arch', 'gpt-moe', '--n-expert', '2', '--n-layer', '2', '--n-embd', '16', '--n-head', '2'],
    ...['--block-size', '16', '--batch-size', '4', '--vocab-size', '32', '--dp', '2', '--ep', '2'],
  ]);
  const o = { dtype: 'f32', recompute: 'none', attention: 'flash' } as const;
  throws(
    () => priceFixedPlan(plan, model, o, DEVICE_PROFILES['a100-80g'], NetworkModel.parse('pcie-eth')),
    /dense GPT plans only/,
  );
});
