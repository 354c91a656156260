import { deepStrictEqual, equal, ok } from 'node:assert/strict';
import { z } from 'zod';
import {
  buildPlan,
  checkPlan,
  compressProblem,
  planFields,
  planParamKey,
  type PlanValues,
} from '../../src/app/panels/plan_fields.ts';
import { parseCompressPolicy } from '../../src/comm/compression.ts';
import { planFromOptions, PlanSchema } from '../../src/parallel/plan/plan_schema.ts';
import { MAX_RUN_WORLD } from '../../src/parallel/plan/limits.ts';
import { CP_KINDS, type PlanModel, planProblems } from '../../src/parallel/plan/plan.ts';
import { SCHEDULE_KINDS } from '../../src/parallel/pipeline/pipeline_schedule.ts';

const MODEL: PlanModel = { nLayer: 4, nHead: 4, nEmbd: 64, blockSize: 32, batchSize: 16, vocabSize: 65 };
const byKey = () => new Map(planFields().map((f) => [f.key, f]));

Deno.test('parallel setup fields: one per PlanSchema key, with its defaults, choices, help and bounds', () => {
  const fields = byKey();
  deepStrictEqual([...fields.keys()], Object.keys(PlanSchema.shape));
  const defaults: Record<string, unknown> = PlanSchema.parse({});
  for (const [key, f] of fields) {
    const schema = PlanSchema.shape[key];
    equal(f.default, defaults[key] === undefined ? undefined : String(defaults[key]), `${key} default`);
    equal(f.help, schema.description, `${key} help`);
    ok(f.help.length > 0, `${key} has help text`);
    let t: z.ZodType = schema;
    while (t instanceof z.ZodDefault || t instanceof z.ZodOptional) t = t.unwrap() as z.ZodType;
    if (t instanceof z.ZodEnum) {
      equal(f.kind, 'enum', key);
      deepStrictEqual(f.options, t.options.map(String), `${key} options`);
    }
    if (t instanceof z.ZodNumber) {
      equal(f.kind, t.isInt ? 'int' : 'number', key);
      equal(f.min, t.minValue, `${key} min`);
      equal(f.max, t.maxValue, `${key} max`);
    }
  }
  // The lists the trainer itself uses.
  deepStrictEqual(fields.get('ppSchedule')!.options, [...SCHEDULE_KINDS]);
  deepStrictEqual(fields.get('cpKind')!.options, [...CP_KINDS]);
  deepStrictEqual(fields.get('zero')!.options, ['0', '1', '2', '3']);
  equal(fields.get('sp')!.kind, 'boolean');
  equal(
    fields.get('microBatches')!.default,
    undefined,
    'micro-batches default to gradAccum, not a number of their own',
  );
  equal(fields.get('net')!.kind, 'text');
});

/** The form's text for `options` (as the page types them) and a network. */
const typed = (options: Record<string, unknown>, world: number): PlanValues => ({
  net: 'nvlink-ib',
  world: String(world),
  ...Object.fromEntries(Object.entries(options).map(([k, v]) => [k, String(v)])),
});

Deno.test('parallel setup: a form value set gives the same plan as planFromOptions', () => {
  const cases: [Record<string, unknown>, number][] = [
    [{}, 1],
    [{ dp: 2, zero: 1 }, 2],
    [{ dp: 2, pp: 2, microBatches: 4, ppSchedule: 'gpipe' }, 4],
    [{ pp: 2, ppSchedule: 'interleaved', virtualStages: 2, microBatches: 2 }, 2],
    [{ tp: 2, sp: true, cp: 2, cpKind: 'ulysses' }, 4],
    [{ dp: 2, ep: 2, sp: false }, 2],
  ];
  for (const gradAccum of [1, 4]) {
    for (const [options, world] of cases) {
      const expected = planFromOptions(options, { gradAccum }, MAX_RUN_WORLD);
      const r = checkPlan(typed(options, world), MODEL, { gradAccum });
      const built = buildPlan(typed(options, world), { gradAccum });
      ok(built.ok, JSON.stringify(built));
      deepStrictEqual(built.plan, expected, JSON.stringify(options));
      deepStrictEqual(
        r,
        planProblems(expected, MODEL, world).length
          ? { ok: false, problems: planProblems(expected, MODEL, world) }
          : { ok: true, choice: { plan: expected, worldSize: world, net: 'nvlink-ib' } },
      );
    }
  }
  // Blank fields take the schema's defaults; micro-batches then follow gradAccum as on the CLI.
  const blank = buildPlan({ net: 'nvlink-ib', dp: '', microBatches: ' ' }, { gradAccum: 3 });
  ok(blank.ok);
  equal(blank.plan.microBatches, 3);
  equal(blank.plan.dp, 1);
});

Deno.test('parallel setup: problems name the field and what it allows, never a JSON dump', () => {
  const problems = (v: Partial<PlanValues>, world = 1) => {
    const r = checkPlan({ net: 'nvlink-ib', world: String(world), ...v }, MODEL, { gradAccum: 1 });
    ok(!r.ok, JSON.stringify(v));
    for (const p of r.problems) ok(!/[{[]"/.test(p), `no JSON in '${p}'`);
    return r.problems.join('; ');
  };
  ok(problems({ dp: '0' }).includes("dp must be a whole number from 1 to 4096, got '0'"));
  ok(problems({ tp: 'two' }).includes("tp must be a whole number from 1 to 4096, got 'two'"));
  ok(problems({ virtualStages: '1.5' }).includes("virtualStages must be a whole number from 1 to 1024, got '1.5'"));
  ok(
    problems({ ppSchedule: 'zigzag' }).includes(`ppSchedule must be one of ${SCHEDULE_KINDS.join(', ')}, got 'zigzag'`),
  );
  ok(problems({ net: 'intra=fast' }).startsWith("net 'intra=fast'"));
  ok(/world size dp·pp·cp·tp = 128·1·1·1 = 128 exceeds the maximum 64 ranks/.test(problems({ dp: '128' })));
  ok(problems({ pp: '2', microBatches: '65536', virtualStages: '2' }, 2).includes('pp × virtualStages × microBatches'));
  ok(problems({}, 17).includes('world size must be a whole number from 1 to 16, got 17'));
  ok(problems({ dp: '2' }, 1).includes('world size 1 ≠ dp·pp·cp·tp'));
  // Every field's problem at once, in the form's order.
  equal(
    problems({ dp: '0', tp: 'x', sp: 'yes', ppSchedule: 'zz' }),
    `dp must be a whole number from 1 to 4096, got '0'; tp must be a whole number from 1 to 4096, got 'x'; ` +
      `sp expects a boolean, got 'yes'; ppSchedule must be one of ${SCHEDULE_KINDS.join(', ')}, got 'zz'`,
  );
  ok(!checkPlan({ net: 'nvlink-ib', world: '1' }, null, { gradAccum: 1 }).ok, 'no plan without a valid model');
});

Deno.test('parallel setup: schedule=gpipe in the URL names the pipeline schedule, schedule=cosine the LR schedule', () => {
  equal(planParamKey('schedule', 'gpipe'), 'ppSchedule');
  equal(planParamKey('schedule', 'cosine'), 'schedule');
  equal(planParamKey('dp', '2'), 'dp');
});

Deno.test('parallel setup: the compression field offers policies that parse, and its plan trains under the policy', () => {
  const f = byKey().get('compress')!;
  equal(f.label, 'Compression');
  equal(f.kind, 'text');
  equal(f.default, 'none');
  ok(f.suggestions!.length > 3);
  for (const v of f.suggestions!) {
    const b = buildPlan({ net: 'nvlink-ib', compress: v }, { gradAccum: 1 });
    ok(b.ok, v);
    deepStrictEqual(b.plan.compress, parseCompressPolicy(v), v);
  }
  const r = checkPlan(typed({ dp: 2, compress: 'dp=topk:0.1' }, 2), MODEL, { gradAccum: 1 });
  ok(r.ok, JSON.stringify(r));
  deepStrictEqual(r.choice.plan.compress, parseCompressPolicy('dp=topk:0.1'));
});

Deno.test('parallel setup: a bad compression policy is one problem in words, quoting the field once', () => {
  const problem = (compress: string, extra: Record<string, unknown> = {}) => {
    const r = checkPlan(typed({ dp: 2, compress, ...extra }, 2), MODEL, { gradAccum: 1 });
    ok(!r.ok, compress);
    return r.problems;
  };
  const allowed = 'none, fp16, bf16, int8[:block], int4[:block], topk[:density], sign, powersgd[:rank]';
  deepStrictEqual(problem('dp=zip'), [`compress 'dp=zip': unknown scheme 'zip' (allowed: ${allowed})`]);
  deepStrictEqual(problem('tp=powersgd'), [`compress 'tp=powersgd': PowerSGD compresses dp gradient matrices only`]);
  deepStrictEqual(problem('naive:powersgd'), [
    `compress 'naive:powersgd': PowerSGD compresses dp gradient matrices only; give it as dp=powersgd:4`,
  ]);
  deepStrictEqual(problem('q=fp16'), [`compress 'q=fp16': unknown dimension 'q' (allowed: dp, tp, pp, cp, ep)`]);
  // With several entries the one at fault keeps its name.
  deepStrictEqual(problem('dp=sign,tp=powersgd'), [
    `compress 'dp=sign,tp=powersgd': tp=powersgd: PowerSGD compresses dp gradient matrices only`,
  ]);
  // In the form's order beside other fields' problems.
  deepStrictEqual(problem('dp=int8:3', { tp: 'x' }), [
    `tp must be a whole number from 1 to 4096, got 'x'`,
    `compress 'dp=int8:3': the int8 block must be one of 32, 64, 128, 256, 512, 1024, 2048, 4096 (allowed: ${allowed})`,
  ]);
  // planProblems' rule names the flag, so the field is marked too.
  ok(problem('dp=powersgd:2', { zero: 1 }).some((p) => /\bcompress\b/.test(p)));
  equal(compressProblem('x', 'something else'), "compress 'x': something else");
});
