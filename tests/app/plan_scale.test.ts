import { deepStrictEqual, equal, ok } from 'node:assert/strict';
import { explorePlans } from '../../src/app/panels/plan_explore.ts';
import {
  MAX_SCALED_LAYERS,
  MAX_SCALED_MICRO_BATCHES,
  MAX_SCALED_WORLD,
  netFields,
  scaleDown,
  setupValues,
} from '../../src/app/panels/plan_scale.ts';
import { checkPlan } from '../../src/app/panels/plan_fields.ts';
import { makePlan, planWorldSize } from '../../src/parallel/plan/plan.ts';
import { checkMeshPlan } from '../../src/parallel/plan/mesh_plan.ts';
import { parseNetwork } from '../../src/comm/network.ts';
import { parseConfig } from '../../src/train/config.ts';

const CLUSTER = { device: 'h100-sxm', net: 'nvlink-ib', dtype: 'bf16', attention: 'flash' } as const;
const DEGREES = ['dp', 'tp', 'pp', 'cp', 'zero', 'sp', 'microBatches', 'schedule', 'virtualStages', 'cpKind'] as const;
const pick = (p: Record<string, unknown>) => Object.fromEntries(DEGREES.map((k) => [k, p[k]]));

/** The Setup values of a scaled run, checked by the page's own validators: parseConfig and checkPlan. */
function checkSetup(run: ReturnType<typeof scaleDown>) {
  const v = setupValues(run, 3, 'nvlink-ib');
  const cfg = parseConfig({ ...v.form, warmup: 0 });
  const model = {
    nLayer: cfg.nLayer,
    nHead: cfg.nHead,
    nEmbd: cfg.nEmbd,
    blockSize: cfg.blockSize,
    batchSize: cfg.batchSize,
    vocabSize: 65,
  };
  const r = checkPlan(v.parallel as never, model, { gradAccum: 1 });
  if (!r.ok) throw new Error(r.problems.join('; '));
  deepStrictEqual(pick(r.choice.plan as never), pick(run.plan as never), 'the parallel Setup builds the scaled plan');
  equal(r.choice.worldSize, run.world);
  equal(cfg.recompute, run.recompute);
  equal(cfg.steps, 3);
}

Deno.test('scaleDown: a plan within 8 ranks runs exactly as chosen, and the Setup builds it', () => {
  const r = explorePlans({ ...CLUSTER, model: 'megatron-1.7b', world: 8, top: 40 });
  if (!r.ok) throw new Error(r.message);
  let exact = 0;
  for (const row of r.rows) {
    const s = scaleDown(row.plan, row.recompute);
    if (!s.changes.length) {
      exact++;
      deepStrictEqual(pick(s.plan as never), pick(row.plan as never));
      equal(s.recompute, row.recompute);
    } else ok(s.changes.every((c) => /micro-batches|mesh trainer/.test(c)), s.changes.join('; '));
    checkSetup(s);
  }
  ok(exact >= 10, `${exact} of 40 exact`);
});

Deno.test('scaleDown: a 1024-GPU plan becomes its nearest plan on ≤ 8 ranks, each change named', () => {
  const r = explorePlans({ ...CLUSTER, model: 'gpt3-175b', world: 1024, top: 30 });
  if (!r.ok) throw new Error(r.message);
  for (const row of r.rows) {
    const s = scaleDown(row.plan, row.recompute);
    ok(s.world <= MAX_SCALED_WORLD && s.world === planWorldSize(s.plan));
    ok(s.plan.microBatches <= MAX_SCALED_MICRO_BATCHES && s.model.nLayer <= MAX_SCALED_LAYERS);
    ok(s.changes[0].startsWith(`${planWorldSize(row.plan)} ranks exceed the 8 rank workers of a tab: `), s.changes[0]);
    for (const k of ['dp', 'tp', 'pp', 'cp'] as const) {
      ok(s.plan[k] <= row.plan[k] && row.plan[k] % s.plan[k] === 0, `${k} divides the chosen degree`);
      if (s.plan[k] !== row.plan[k]) ok(s.changes[0].includes(`${k} ${row.plan[k]} → ${s.plan[k]}`), s.changes[0]);
    }
    checkSetup(s);
  }
});

Deno.test('scaleDown: the reduction keeps the largest degrees longest and meets the mesh trainer', () => {
  const s = scaleDown(makePlan({ dp: 8, tp: 8, pp: 16, microBatches: 192 }), 'full');
  deepStrictEqual([s.plan.dp, s.plan.tp, s.plan.pp], [2, 2, 2]);
  equal(s.plan.microBatches, 8);
  deepStrictEqual(s.model, { nLayer: 2, nHead: 2, nEmbd: 32, blockSize: 16, batchSize: 16 });
  // The mesh trainer composes ZeRO-3 with recomputation and with an interleaved pipeline: both kept.
  const z = scaleDown(makePlan({ dp: 2, zero: 3 }), 'selective');
  deepStrictEqual([z.plan.zero, z.recompute, z.changes], [3, 'selective', []]);
  const zi = scaleDown(
    makePlan({ dp: 2, pp: 2, zero: 2, schedule: 'interleaved', virtualStages: 2, microBatches: 2 }),
    'full',
  );
  deepStrictEqual([zi.plan.zero, zi.plan.schedule, zi.changes], [2, 'interleaved', []]);
  // Ulysses needs heads divisible by tp · cp; interleaved needs pp · v layers and m a multiple of pp.
  const u = scaleDown(makePlan({ cp: 4, tp: 2, cpKind: 'ulysses' }), 'none');
  equal(u.model.nHead, 8);
  const i = scaleDown(makePlan({ pp: 4, schedule: 'interleaved', virtualStages: 4, microBatches: 12 }), 'none');
  deepStrictEqual([i.plan.virtualStages, i.plan.microBatches, i.model.nLayer], [2, 8, 8]);
  const cfg = parseConfig({ ...i.model, batchSize: i.model.batchSize / 8, gradAccum: 8 });
  checkMeshPlan(i.plan, cfg, 65, i.world);
  // Sequence parallelism and ZeRO lose their group when tp or dp·cp shrink to 1.
  const sp = scaleDown(makePlan({ tp: 16, sp: true }), 'none');
  equal(sp.plan.tp, 8);
  equal(sp.plan.sp, true);
  const lone = scaleDown(makePlan({ dp: 3, tp: 3, zero: 1 }), 'none'); // a tie: dp goes first
  deepStrictEqual([lone.plan.dp, lone.plan.tp, lone.plan.zero, lone.model.nHead], [1, 3, 0, 3]);
  ok(lone.changes.includes('ZeRO-1 shards over dp·cp = 1: ZeRO 0'), lone.changes.join('; '));
});

Deno.test('netFields: a preset by name, any other network as the custom fields', () => {
  deepStrictEqual(netFields('pcie-eth'), { net: 'pcie-eth' });
  const f = netFields('intra=100GB/s,2us;inter=10Gb/s,20us;node=4');
  deepStrictEqual(f, { net: 'custom', intraBw: '100', intraLat: '2', interBw: '1.25', interLat: '20', node: '4' });
  const back = parseNetwork(
    `intra=${f.intraBw}GB/s,${f.intraLat}us;inter=${f.interBw}GB/s,${f.interLat}us;node=${f.node}`,
  );
  equal(back.inter.betaGBps, 1.25);
});
