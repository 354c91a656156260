/** ParallelPlan validation (one error listing every broken rule) and the rank ↔ coordinate mapping. */
import { deepStrictEqual, equal, match, ok, throws } from 'node:assert/strict';
import {
  checkPlan,
  DEFAULT_PLAN,
  describePlan,
  makePlan,
  paddedVocab,
  planGroup,
  planProblems,
  rankAt,
  rankCoords,
} from '../../src/parallel/plan/plan.ts';
import { strategyOf } from '../../src/parallel/plan/strategy.ts';
import { DeviceMesh } from '../../src/comm/mesh.ts';

const MODEL = { nLayer: 4, nHead: 4, nEmbd: 64, blockSize: 64, batchSize: 16, vocabSize: 65 };

Deno.test('defaults are a single rank; good combinations pass', () => {
  deepStrictEqual({ ...DEFAULT_PLAN }, {
    dp: 1,
    pp: 1,
    cp: 1,
    tp: 1,
    ep: 1,
    zero: 0,
    sp: false,
    schedule: '1f1b',
    virtualStages: 1,
    microBatches: 1,
    cpKind: 'ring',
  });
  for (
    const over of [
      {},
      { dp: 2, tp: 2, pp: 2 },
      { dp: 2, zero: 3 as const },
      { tp: 2, sp: true },
      { cp: 2 },
      { cp: 2, cpKind: 'ulysses' as const },
      { pp: 2, schedule: 'interleaved' as const, virtualStages: 2, microBatches: 2 },
      { pp: 4, schedule: 'gpipe' as const, microBatches: 8 },
    ]
  ) {
    const plan = makePlan(over);
    equal(checkPlan(plan, MODEL, plan.dp * plan.pp * plan.cp * plan.tp), plan);
  }
  checkPlan(makePlan({ dp: 2, ep: 2 }), { ...MODEL, nExpert: 4 }, 2);
});

Deno.test('each invalid combination names its rule', () => {
  const cases: [Partial<typeof DEFAULT_PLAN>, RegExp, Partial<typeof MODEL & { nExpert: number }>?][] = [
    [{ tp: 3 }, /nEmbd 64 is not divisible by tp 3/],
    [{ tp: 8 }, /heads 4 not divisible by tp 8/],
    [{ cp: 3, cpKind: 'ulysses' }, /heads 4 not divisible by the Ulysses degree cp 3/, { blockSize: 66 }],
    [{ tp: 2, cp: 4, cpKind: 'ulysses' }, /heads per TP rank 2 not divisible by the Ulysses degree cp 4/],
    [{ pp: 2 }, /layers 3 not divisible by pp 2/, { nLayer: 3 }],
    [{ cp: 2 }, /sequence 66 not divisible by cp·2 = 4 for zig-zag ring attention/, { blockSize: 66 }],
    [{ dp: 2, microBatches: 3 }, /batch 16 not divisible by micro-batches × dp \(3 × 2\)/],
    [{ sp: true }, /sequence parallel \(sp\) requires tp > 1/],
    [{ zero: 2 }, /zero 2 shards over the dp·cp group and requires dp·cp > 1/],
    [{ dp: 2, ep: 4 }, /ep must divide dp \(ep 4, dp 2\)/, { nExpert: 4 }],
    [{ dp: 2, ep: 2 }, /ep 2 needs a mixture-of-experts model \(nExpert\)/],
    [{ dp: 2, ep: 2 }, /experts 3 not divisible by ep 2/, { nExpert: 3 }],
    [
      { pp: 2, schedule: 'interleaved', virtualStages: 2, microBatches: 3 },
      /interleaved 1F1B needs micro-batches 3 divisible by pp 2/,
      { batchSize: 15 },
    ],
    [{ schedule: 'interleaved', virtualStages: 2 }, /schedule interleaved requires pp > 1/],
    [{ virtualStages: 2 }, /virtualStages 2 needs schedule interleaved/],
    [{ tp: 2, sp: true }, /sequence 33 per CP rank not divisible by tp 2 for sequence parallelism/, { blockSize: 33 }],
    [{ dp: 0 }, /dp must be a positive integer, got 0/],
    [{ zero: 4 as never }, /zero must be 0, 1, 2 or 3, got 4/],
    [{ schedule: 'zigzag' as never }, /schedule 'zigzag' is not one of gpipe, 1f1b, interleaved/],
  ];
  for (const [over, re, model] of cases) {
    throws(() => checkPlan(makePlan(over), { ...MODEL, ...model }), (e: Error) => {
      match(e.message, /^invalid parallel plan: /);
      match(e.message, re);
      return true;
    }, `${JSON.stringify(over)} → ${re}`);
  }
});

Deno.test('one error lists every violated rule, and the world size must match', () => {
  const probs = planProblems(makePlan({ dp: 2, tp: 3, pp: 2, microBatches: 3 }), { ...MODEL, nLayer: 3 }, 8);
  deepStrictEqual(probs.length, 5, probs.join('\n'));
  const msg = (() => {
    try {
      checkPlan(makePlan({ dp: 2, tp: 3, pp: 2, microBatches: 3 }), { ...MODEL, nLayer: 3 }, 8);
    } catch (e) {
      return (e as Error).message;
    }
    return '';
  })();
  for (
    const re of [
      /nEmbd 64 is not divisible by tp 3/,
      /heads 4 not divisible by tp 3/,
      /layers 3 not divisible by pp 2/,
      /batch 16 not divisible by micro-batches × dp \(3 × 2\)/,
      /world size 8 ≠ dp·pp·cp·tp = 2·2·1·3 = 12/,
    ]
  ) match(msg, re);
  throws(() => checkPlan(makePlan({ dp: 2, tp: 2 }), MODEL, 8), /world size 8 ≠ dp·pp·cp·tp = 2·1·1·2 = 4/);
});

Deno.test('rank ↔ coordinates follow DeviceMesh; EP groups are consecutive DP indices', () => {
  const plan = makePlan({ dp: 4, pp: 2, tp: 2, ep: 2 }), mesh = new DeviceMesh([4, 2, 1, 2], 16);
  for (let r = 0; r < 16; r++) {
    const c = rankCoords(plan, r);
    deepStrictEqual({ dp: c.dp, pp: c.pp, cp: c.cp, tp: c.tp }, mesh.coords(r));
    equal(rankAt(plan, c), r);
    equal(c.ep, c.dp % 2);
    for (const d of ['dp', 'pp', 'cp', 'tp'] as const) deepStrictEqual(planGroup(plan, d, r), mesh.group(d, r));
  }
  // rank 5 = dp 1, pp 0, tp 1: its DP group is [1, 5, 9, 13]; EP pairs dp indices {0,1} and {2,3}.
  deepStrictEqual(planGroup(plan, 'ep', 5), [1, 5]);
  deepStrictEqual(planGroup(plan, 'ep', 9), [9, 13]);
  ok(describePlan(plan).includes('dp 4 · pp 2 · cp 1 · tp 2 · ep 2'));
  equal(paddedVocab(65, 2), 66);
  equal(paddedVocab(65, 1), 65);
});

Deno.test('ep runs both MoE architectures, also with ep < dp and under ZeRO; other dimensions and dense archs are refused by name', () => {
  for (const arch of ['gpt-moe', 'mamba-moe']) {
    equal(strategyOf(makePlan({ dp: 2, ep: 2 }), arch), 'mesh');
    equal(strategyOf(makePlan({ dp: 4, ep: 2 }), arch), 'mesh');
  }
  checkPlan(makePlan({ dp: 4, ep: 2 }), { ...MODEL, nExpert: 4 }, 4);
  for (const zero of [1, 2, 3] as const) equal(strategyOf(makePlan({ dp: 4, ep: 2, zero }), 'gpt-moe'), 'mesh');
  equal(strategyOf(makePlan({ dp: 2, ep: 2, tp: 2 }), 'gpt-moe'), 'mesh', 'the mesh composes ep with tp');
  equal(strategyOf(makePlan({ dp: 2, ep: 2, pp: 2 }), 'mamba-moe'), 'mesh', 'and with pp');
  throws(() => strategyOf(makePlan({ dp: 2, ep: 2, cp: 2 }), 'gpt-moe'), /cp 2 does not apply to --arch gpt-moe/);
  equal(strategyOf(makePlan({ dp: 2, ep: 2, tp: 2, sp: true }), 'gpt-moe'), 'mesh', 'and with sp');
  throws(() => strategyOf(makePlan({ dp: 2, ep: 2 }), 'mamba'), /ep 2 needs --arch gpt-moe or mamba-moe, got mamba/);
  match(
    planProblems(makePlan({ dp: 4, ep: 3 }), { ...MODEL, nExpert: 6 }).join('; '),
    /ep must divide dp \(ep 3, dp 4\)/,
  );
});
