/**
 * One plan, checked once (src/parallel/plan/rules.ts): the same bad plans reach every entry point — the rules
 * themselves, `npm run plan`'s and a parallel `npm run train`'s parse-and-check path (one case as a real
 * subprocess), the browser's Setup form and the plan search's filter — and each reports the same message, the
 * table's. Ranks receive a checked plan and have no entry point of their own. A world too large for the caller is
 * the table's limit rule, whose maximum is the caller's (a real run, a prediction, a search). The help text of every
 * split names exactly the architectures the table lets it take.
 */
import { deepEqual, equal, match, ok } from 'node:assert/strict';
import { ARCH_NAMES } from '../../src/models/archs.ts';
import { parseConfig } from '../../src/train/config.ts';
import { checkPlan, makePlan, type ParallelPlan } from '../../src/parallel/plan/plan.ts';
import { archRuleProblems, planProblems } from '../../src/parallel/plan/rules.ts';
import { runFactsOf } from '../../src/parallel/plan/mesh_plan.ts';
import { PlanSchema } from '../../src/parallel/plan/plan_schema.ts';
import { MAX_PLAN_WORLD, MAX_RUN_WORLD, MAX_SEARCH_WORLD } from '../../src/parallel/plan/limits.ts';
import { SPLIT_ARCHS, type SplitDim } from '../../src/parallel/plan/splits.ts';
import { planModelOf } from '../../src/parallel/run/run.ts';
import { checkCommand } from '../../src/cli/command.ts';
import { planFromArgs } from '../../src/cli/plan.ts';
import { splitHelp } from '../../src/cli/train_parallel.ts';
import { checkRun } from '../../src/perf/measure.ts';
import { checkPlan as checkForm, type PlanValues } from '../../src/app/panels/plan_fields.ts';
import { planSpace } from '../../src/perf/plan_space.ts';
import { runCli } from '../util/cli.ts';

const V = 65;
/** The model of every case: 4 layers of 4 heads, width 64, context 64, a global batch of 16. */
const SHAPE = ['--n-layer', '4', '--n-head', '4', '--n-embd', '64', '--block-size', '64', '--batch-size', '16'];

interface Case {
  what: string;
  /** The flags of the plan (and architecture) on top of {@link SHAPE}. */
  flags: string[];
  /** The table's message, word for word. */
  message: string;
  /** The plan search enumerates this split on this many ranks (dp·tp·pp·cp = world always holds there). */
  searchWorld?: number;
}

const CASES: Case[] = [
  { what: 'tp not dividing heads', flags: ['--tp', '3'], message: 'heads 4 not divisible by tp 3', searchWorld: 3 },
  {
    what: 'ep on a dense architecture',
    flags: ['--dp', '2', '--ep', '2'],
    message: 'ep 2 needs --arch gpt-moe or mamba-moe, got gpt',
  },
  {
    what: 'cp on mamba',
    flags: ['--arch', 'mamba', '--cp', '2'],
    message: `cp 2 does not apply to --arch mamba: ${SPLIT_ARCHS.cp.why} (allowed: gpt, recurrent-depth)`,
    searchWorld: 2,
  },
  { what: 'pp above the layers', flags: ['--pp', '8'], message: 'layers 4 not divisible by pp 8', searchWorld: 8 },
  {
    what: 'sync with cp',
    flags: ['--dp', '2', '--cp', '2', '--sync', 'diloco'],
    message: '--sync diloco needs cp 1 (a worker is a dp replica of tp × pp ranks)',
  },
  {
    what: 'zero 3 without a group',
    flags: ['--zero', '3'],
    message: 'zero 3 shards over the dp·cp group and requires dp·cp > 1',
  },
  {
    what: 'zero with PowerSGD',
    flags: ['--dp', '2', '--zero', '1', '--compress', 'dp=powersgd'],
    message: '--compress dp=powersgd needs zero 0',
  },
  {
    what: 'goldfish in a parallel run',
    flags: ['--dp', '2', '--goldfish', '4'],
    message: 'goldfishK must be 0 in a parallel run',
  },
];

/** camelCase flag values of `flags` for the Setup form (its fields are the plan schema's keys). */
function formValues(flags: string[]): PlanValues {
  const out: Record<string, string> = {};
  for (let i = 0; i < flags.length; i += 2) {
    const key = flags[i].slice(2).replace(/-([a-z])/g, (_, c: string) => c.toUpperCase());
    if (key in PlanSchema.shape) out[key] = flags[i + 1];
  }
  return out as PlanValues;
}

/** The error an async or sync call throws, as its message ('' when it does not throw). */
async function thrown(fn: () => unknown): Promise<string> {
  try {
    await fn();
  } catch (e) {
    return (e as Error).message;
  }
  return '';
}

Deno.test('every entry point reports the table’s message for the same bad plan', async () => {
  for (const c of CASES) {
    const argv = [...SHAPE, ...c.flags, '--vocab-size', String(V)];
    // `npm run plan`'s path: flags → config and plan → model → the table.
    const fromPlanCli = await thrown(() => planFromArgs(argv));
    ok(fromPlanCli.includes(c.message), `${c.what}: npm run plan said '${fromPlanCli}'`);
    // A parallel `npm run train`'s path before any worker: the same flags and config, then checkRun.
    const { cfg, plan } = await checkCommand(argv.slice(0, -2), 'train');
    const fromTrain = await thrown(() => checkRun(plan!, cfg!, V));
    ok(fromTrain.includes(c.message), `${c.what}: npm run train said '${fromTrain}'`);
    // The rules themselves, and the Setup form, with the same config (the form's world is the plan's).
    const model = planModelOf(makePlan(), cfg!, V), world = plan!.dp * plan!.pp * plan!.cp * plan!.tp;
    const fromRules = await thrown(() => checkPlan(plan!, model, world, runFactsOf(cfg!)));
    ok(fromRules.startsWith('invalid parallel plan: ') && fromRules.includes(c.message), `${c.what}: ${fromRules}`);
    const form = checkForm({ ...formValues(c.flags), world: String(world), net: 'nvlink-ib' }, model, {
      gradAccum: cfg!.gradAccum,
      run: runFactsOf(cfg!),
    });
    ok(
      !form.ok && form.problems.some((p) => p.includes(c.message)),
      `${c.what}: the form said ${JSON.stringify(form)}`,
    );
    if (c.searchWorld) {
      const examples = [...planSpace(model, c.searchWorld).rejections.values()].map((r) => r.example);
      ok(examples.some((e) => e.includes(c.message)), `${c.what}: the search noted ${JSON.stringify(examples)}`);
    }
  }
});

Deno.test('the form and the rules agree on a world size that is not the plan’s', () => {
  const cfg = parseConfig({ nLayer: 4, nHead: 4, nEmbd: 64, blockSize: 64, batchSize: 16 });
  const model = planModelOf(makePlan(), cfg, V), message = 'world size 8 ≠ dp·pp·cp·tp = 2·1·1·1 = 2';
  const form = checkForm({ dp: '2', world: '8', net: 'nvlink-ib' }, model, { gradAccum: 1, run: runFactsOf(cfg) });
  ok(!form.ok && form.problems.includes(message), JSON.stringify(form));
  deepEqual(planProblems(makePlan({ dp: 2 }), model, 8, runFactsOf(cfg)), [message]);
});

/** 131 072 ranks: more than a real run (64), a prediction (4096) or a plan search (65 536) takes. */
const HUGE = { dp: 16, pp: 2, tp: 4096 };
const HUGE_FLAGS = ['--dp', '16', '--pp', '2', '--tp', '4096'];
/** The table's world-size limit rule (limits.ts), word for word, for a caller of at most `max` ranks. */
const tooLarge = (max: number, what: string) =>
  `world size --dp·--pp·--cp·--tp = 16·2·1·4096 = 131072 exceeds the maximum ${max} ranks of ${what}`;
const REAL_RUN = tooLarge(MAX_RUN_WORLD, `a real run (npm run plan predicts up to ${MAX_PLAN_WORLD})`);

Deno.test('a world too large: every entry point reports the table’s limit rule with its own maximum', async () => {
  const cfg = parseConfig({ nLayer: 4, nHead: 4, nEmbd: 64, blockSize: 64, batchSize: 16 });
  const model = planModelOf(makePlan(), cfg, V), plan = makePlan(HUGE), argv = [...SHAPE, ...HUGE_FLAGS];
  // The rules themselves, for each caller's maximum.
  for (
    const [max, message] of [[MAX_RUN_WORLD, REAL_RUN], [MAX_PLAN_WORLD, tooLarge(MAX_PLAN_WORLD, 'a prediction')]]
  ) {
    const fromRules = await thrown(() => checkPlan(plan, model, undefined, runFactsOf(cfg), max as number));
    ok(fromRules.startsWith('invalid parallel plan: ') && fromRules.includes(message as string), fromRules);
  }
  // A parallel `npm run train`: refused from the flags, before a model is built; and a plan made in code is refused
  // by the host's check before any worker (checkRun).
  equal(await thrown(() => checkCommand(argv, 'train')), REAL_RUN);
  ok((await thrown(() => checkRun(plan, cfg, V))).includes(REAL_RUN));
  // `npm run plan` predicts up to MAX_PLAN_WORLD ranks, and measures (a real step) up to a real run's.
  const withVocab = [...argv, '--vocab-size', String(V)];
  equal(await thrown(() => planFromArgs(withVocab)), tooLarge(MAX_PLAN_WORLD, 'a prediction'));
  equal(await thrown(() => planFromArgs([...withVocab, '--measure'])), REAL_RUN);
  // The Setup form trains for real; it names its fields where the CLI names flags.
  const form = checkForm({ dp: '16', pp: '2', tp: '4096', world: '131072', net: 'nvlink-ib' }, model, {
    gradAccum: 1,
    run: runFactsOf(cfg),
  });
  ok(!form.ok && form.problems.includes(REAL_RUN.replaceAll('--', '')), JSON.stringify(form));
  // The plan search notes the rule for every split of the world (numbers masked), with a search's maximum.
  const key = tooLarge(MAX_SEARCH_WORLD, 'a plan search').replace(/\d+/g, 'N');
  const noted = planSpace(model, 131_072).rejections.get(key);
  ok(noted && noted.count > 0 && noted.example.includes('= 131072 exceeds the maximum 65536 ranks'), key);
});

Deno.test({
  name: 'npm run train in a subprocess refuses a bad plan with the table’s message before any worker starts',
  sanitizeResources: false,
  fn: async () => {
    const r = await runCli('train.ts', [...SHAPE, '--arch', 'mamba', '--cp', '2', '--steps', '1']);
    ok(r.code !== 0, r.stderr);
    const lines = r.stderr.trim().split('\n').filter((l) => l.startsWith('error:'));
    equal(lines.length, 1, r.stderr);
    match(lines[0], /^error: invalid parallel plan: cp 2 does not apply to --arch mamba: /);
  },
});

/** The architectures the table lets `dim` take: those whose plan with `dim` on breaks no architecture rule. */
function allowedBy(dim: SplitDim): string[] {
  const on: Partial<ParallelPlan> = dim === 'sp' ? { tp: 2, sp: true } : dim === 'ep' ? { dp: 2, ep: 2 } : { [dim]: 2 };
  return ARCH_NAMES.filter((arch) => archRuleProblems(makePlan(on), arch).length === 0);
}

Deno.test('the help text of every split names exactly the architectures the table allows', () => {
  const lines = splitHelp().split('\n');
  for (const dim of ['tp', 'sp', 'pp', 'cp', 'ep'] as const) {
    const allowed = allowedBy(dim);
    ok(allowed.length > 0 && allowed.length <= ARCH_NAMES.length, dim);
    // The flag's own help (plan_schema.ts, printed by --help of npm run train and npm run plan).
    const described = PlanSchema.shape[dim].description ?? '';
    const listed = /--arch ([a-z-]+(?: \| [a-z-]+)*)/.exec(described);
    ok(listed, `${dim}'s help names its architectures: ${described}`);
    deepEqual(listed[1].split(' | ').sort(), [...allowed].sort(), `${dim}: ${described}`);
    // train_parallel.ts's summary, one line per split.
    const line = lines.find((l) => l.trim().startsWith(`${dim} `));
    ok(line, `${dim} has a line in the parallel help`);
    deepEqual(line.trim().slice(dim.length).trim().split(', ').sort(), [...allowed].sort(), line);
  }
});
