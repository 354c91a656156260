/**
 * Fuzzes the flags of `npm run train` and `npm run plan` (seeded, so a failure reproduces):
 * random combinations of valid values, blanks, whitespace, hex, huge numbers, negatives,
 * NaN/Infinity, unknown flags, missing values and booleans with values. In process, through
 * the entries the CLIs use (checkCommand, plan's planFromArgs), every outcome must be a config
 * or an Error naming an offending flag — never a TypeError/RangeError, never a blank read as 0.
 * As subprocesses, every run must exit 0, or 1 with one `error:` line naming the flag and no
 * stack trace or crash.
 */
import { equal, ok } from 'node:assert/strict';
import { checkCommand, PlanCliSchema } from '../../src/cli/command.ts';
import { choicesOf, type FlagKey, flagKeys, parseDecimal } from '../../src/cli/flags.ts';
import { planFromArgs } from '../../src/cli/plan.ts';
import { TrainConfigSchema } from '../../src/train/config.ts';
import { PlanSchema } from '../../src/parallel/plan_schema.ts';
import { Random } from '../../src/util/random.ts';
import { runCli } from '../util/cli.ts';

/** FUZZ_SEED=n explores other command lines; CI runs the fixed seed. */
const SEED = parseDecimal(Deno.env.get('FUZZ_SEED') ?? '') ?? 0x5eed;
const IN_PROCESS = 1200;

const VALID = ['1', '2', '4', '8', '16', '64', '0', '0.5', '1e-3', '3e-4', '0.9', '2e1'];
const SMALL = ['1', '2', '4', '0', '0.5', '1e-3'];
/** Texts that are not a finite decimal: each must be refused, never read as 0. */
const BAD = [
  '',
  ' ',
  '  ',
  '\t',
  '0x10',
  '0X1f',
  'NaN',
  'Infinity',
  '-Infinity',
  '1e999',
  'abc',
  '1,5',
  '1_000',
  '12px',
  ' 4',
  '4 ',
];
const HUGE = ['1e9', '1e20', '99999999999999999999', '65537', '4097', '1e300', '131073'];
const NEGATIVE = ['-1', '-0.5', '-1e9', '-0'];
const UNKNOWN = ['--bogus', '--n-layers', '-x', '--dp2', '--learning-rate', '--vocab', '--'];

const train = flagKeys(TrainConfigSchema).filter((k) => k.key !== 'data');
const plan = flagKeys(PlanSchema);
const planCli = flagKeys(PlanCliSchema).filter((k) => k.key !== 'measure');
const choices = (k: FlagKey) => choicesOf(k.field) ?? [];

interface Case {
  command: 'train' | 'plan';
  argv: string[];
  /** Numeric flags given a text that is not a finite decimal. */
  bad: string[];
}

/** One random command line; `small` keeps worlds and pipelines small enough to print quickly. */
function randomCase(r: Random, configs: string[], small = false): Case {
  const command = r.int(2) ? 'plan' : 'train';
  const argv: string[] = command === 'plan' && r.uniform() < 0.9 ? ['--vocab-size', '65'] : [];
  const bad: string[] = [];
  const pick = <T>(xs: readonly T[]) => xs[r.int(xs.length)];
  const pool = [...train, ...(command === 'plan' || r.int(2) ? plan : []), ...(command === 'plan' ? planCli : [])];
  const put = (flag: string, value: string) => {
    if (r.uniform() < 0.5 || value.startsWith('-')) argv.push(`--${flag}=${value}`);
    else argv.push(`--${flag}`, value);
  };
  for (let n = 1 + r.int(5); n > 0; n--) {
    const roll = r.uniform();
    if (roll < 0.08) argv.push(pick(UNKNOWN));
    else if (roll < 0.13) argv.push(`--${pick(pool.filter((k) => k.kind !== 'boolean')).flag}`); // missing value (or a flag where the value should be)
    else if (roll < 0.2) {
      const k = pick([...pool.filter((x) => x.kind === 'boolean')]);
      if (!k) continue;
      const form = r.int(6);
      if (form === 0) argv.push(`--${k.flag}`);
      else if (form === 1) argv.push(`--no-${k.flag}`);
      else if (form === 2) argv.push(`--${k.flag}=${pick(['true', 'false', 'yes', '', '0'])}`);
      else if (form === 3) argv.push(`--${k.flag}`, pick(['true', 'false', '1', 'no']));
      else argv.push(`--no-${k.flag}=${pick(['true', 'false'])}`);
    } else if (roll < 0.27) {
      const [flag, values] = pick(
        [
          ['preset', ['tiny', 'nanogpt-cpu', 'huge', '', 'toString']],
          ['gpu', ['auto', 'wgpu', 'x', ' ']],
          ['neftune', ['5', ' ', '0x5', '-1']],
          ['goldfish', ['4,13', '3', '4;13', ' ', '1']],
          ['resume-step', ['3', ' ', '0x3']],
          ['config', configs],
          ['schedule', ['gpipe', '1f1b', 'wsd', ' ']],
        ] as const,
      );
      const v = pick(values as readonly string[]);
      if (['neftune', 'resume-step'].includes(flag) && parseDecimal(v) === undefined) bad.push(flag);
      put(flag, v);
    } else {
      const k = pick(pool.filter((x) => x.kind !== 'boolean'));
      if (k.kind === 'string') {
        put(
          k.flag,
          pick([
            ...choices(k),
            '',
            ' ',
            'bogus',
            ...(k.flag === 'net' ? ['nvlink-ib', 'node=0', 'intra=1GB/s,1us;inter=1GB/s,1us;node=1e999'] : []),
          ]),
        );
        continue;
      }
      const kind = r.uniform();
      const v = kind < 0.5
        ? pick(small ? SMALL : VALID)
        : kind < 0.75
        ? pick(BAD)
        : kind < 0.9
        ? pick(small ? ['1e9', '1e20', '4097'] : HUGE)
        : pick(NEGATIVE);
      if (parseDecimal(v) === undefined) bad.push(k.flag);
      put(k.flag, v);
    }
  }
  if (r.uniform() < 0.03) argv.push('--help');
  return { command, argv, bad };
}

/** Words the parallel plan's rules (src/parallel/plan.ts) use for a flag. */
const RULE_WORDS: Record<string, string> = {
  'pp-schedule': 'schedule',
  schedule: 'schedule',
  'n-head': 'heads',
  'n-layer': 'layers',
  'block-size': 'sequence',
  'batch-size': 'batch',
  'grad-accum': 'batch',
  'n-expert': 'experts',
};

/** True when `message` names one of the flags of `argv` (kebab, camelCase or a plan rule's word for it). */
function namesAFlag(message: string, argv: string[]): boolean {
  return argv.filter((a) => a.startsWith('-')).map((a) => a.split('=')[0]).some((name) => {
    const bare = name.replace(/^-+/, '').replace(/^no-/, ''),
      camel = bare.replace(/-([a-z])/g, (_, c: string) => c.toUpperCase());
    const word = (w: string) => new RegExp(`(^|[^\\w-])${w}([^\\w-]|$)`).test(message);
    return message.includes(name) || (camel.length > 1 && message.includes(camel)) || word(bare) ||
      (bare in RULE_WORDS && word(RULE_WORDS[bare]));
  });
}

/** The in-process entry of each command: plan's planFromArgs, train's checkCommand. */
async function outcome(c: Case): Promise<{ error?: unknown; cfg?: Record<string, unknown> | null }> {
  try {
    if (c.command === 'plan') return { cfg: (await planFromArgs(c.argv)).cfg };
    return { cfg: (await checkCommand(c.argv, 'train')).cfg };
  } catch (error) {
    return { error };
  }
}

const show = (c: Case) => `${c.command} ${JSON.stringify(c.argv)}`;

async function configFiles(dir: string): Promise<string[]> {
  const files = {
    'null.json': 'null',
    'array.json': '[1, 2]',
    'number.json': '7',
    'malformed.json': '{"nLayer": ',
    'good.json': '{"nLayer": 1}',
    'big.json': '{"nEmbd": 1e9}',
    'unknown.json': '{"colour": 1}',
  };
  for (const [name, text] of Object.entries(files)) await Deno.writeTextFile(`${dir}/${name}`, text);
  return [...Object.keys(files).map((n) => `${dir}/${n}`), `${dir}/missing.json`, ' '];
}

Deno.test(`fuzz: ${IN_PROCESS} random command lines through the CLIs' parse-and-validate entries`, async () => {
  const dir = await Deno.makeTempDir({ prefix: 'fuzz-config-' });
  const configs = await configFiles(dir), r = new Random(SEED);
  let passed = 0, refused = 0;
  for (let i = 0; i < IN_PROCESS; i++) {
    const c = randomCase(r, configs);
    const { error, cfg } = await outcome(c);
    if (error === undefined) {
      equal(c.bad.length, 0, `${show(c)}: accepted although ${c.bad.join(', ')} is not a number`);
      for (
        const k of train.filter((k) =>
          k.kind === 'number' && cfg && !c.argv.includes('--help') && !c.argv.some((a) =>
            /^--(neftune|goldfish|config)\b/.test(a)
          ) && !/^rewarm/.test(k.key)
        )
      ) {
        const given = c.argv.map((
          a,
          j,
        ) => (a === `--${k.flag}`
          ? c.argv[j + 1]
          : a.startsWith(`--${k.flag}=`)
          ? a.slice(k.flag.length + 3)
          : undefined)
        ).filter((v) => v !== undefined).at(-1);
        if (given !== undefined) equal(cfg![k.key], parseDecimal(given), `${show(c)}: ${k.key}`);
      }
      passed++;
    } else {
      ok(
        error instanceof Error && error.constructor === Error,
        `${show(c)}: ${(error as Error)?.constructor?.name}: ${error}`,
      );
      ok(namesAFlag(error.message, c.argv), `${show(c)}: the error names no flag: ${error.message}`);
      refused++;
    }
  }
  console.log(`seed ${SEED}: ${passed} accepted, ${refused} refused`);
  ok(passed > 100 && refused > 100, `both outcomes are exercised (${passed} accepted, ${refused} refused)`);
  await Deno.remove(dir, { recursive: true });
});

/** Runs `jobs` with at most `limit` at a time. */
async function pool<T>(jobs: (() => Promise<T>)[], limit: number): Promise<T[]> {
  const out: T[] = [];
  let next = 0;
  await Promise.all(Array.from({ length: limit }, async () => {
    while (next < jobs.length) {
      const i = next++;
      out[i] = await jobs[i]();
    }
  }));
  return out;
}

const TINY = [
  '--n-layer',
  '1',
  '--n-embd',
  '16',
  '--n-head',
  '2',
  '--block-size',
  '16',
  '--batch-size',
  '2',
  '--eval-interval',
  '1',
  '--sample-tokens',
  '0',
];
const TRAIN_OK = [
  ['--seed', '7'],
  ['--bias', 'false'],
  ['--no-bias'],
  ['--bias=true'],
  ['--lr', '1e-3'],
  ['--weight-decay', '0'],
  ['--min-lr', '0'],
  ['--warmup', '0'],
  ['--grad-accum', '2'],
  ['--attention', 'naive'],
];
const TRAIN_BAD = [
  ['--seed', ' '],
  ['--n-embd', '1e9'],
  ['--bias=yes'],
  ['--bogus'],
  ['--weight-decay', '0x10'],
  ['--min-lr', ''],
  ['--steps', 'Infinity'],
  ['--dp', '128'],
  ['--zero', ' ', '--dp', '2'],
  ['--block-size', '-16'],
];

Deno.test({
  name: 'fuzz: plan and train subprocesses exit 0, or 1 with one error line naming the flag',
  sanitizeResources: false,
  sanitizeOps: false,
  fn: async () => {
    const dir = await Deno.makeTempDir({ prefix: 'fuzz-cli-' });
    const configs = await configFiles(dir), r = new Random(SEED + 1);
    const cases: Case[] = [];
    while (cases.length < 34) {
      const c = randomCase(r, configs, true);
      if (c.command === 'plan') cases.push(c);
    }
    for (let i = 0; i < 9; i++) {
      const good = i < 5, pick = <T>(xs: T[]) => xs[r.int(xs.length)];
      const flags = good
        ? [...pick(TRAIN_OK), ...(r.int(2) ? pick(TRAIN_OK) : [])]
        : [...pick(TRAIN_BAD), ...(r.int(2) ? pick(TRAIN_OK) : [])];
      cases.push({
        command: 'train',
        argv: [...TINY, ...flags, '--steps', '1', '--out', `${dir}/run-${i}`],
        bad: good ? [] : ['*'],
      });
    }
    const started = performance.now();
    const results = await pool(
      cases.map((c) => async () => {
        const t0 = performance.now(), res = await runCli(`${c.command}.ts`, c.argv);
        return { ...res, s: (performance.now() - t0) / 1000 };
      }),
      2,
    );
    for (const [i, c] of cases.entries()) {
      const res = results[i], where = `${show(c)}\nexit ${res.code}\nstderr: ${res.stderr}`;
      ok(res.code === 0 || res.code === 1, `exit 0 or 1 (no crash): ${where}`);
      // A JavaScript frame (file:, ext:, node:) is a leaked stack; Dawn's own C++ warnings are not.
      ok(!/Fatal|^\s+at .*(?:file:\/\/|ext:|node:)/m.test(res.stderr), `no crash or stack trace: ${where}`);
      if (c.bad.length) equal(res.code, 1, `refused: ${where}`);
      if (res.code === 1) {
        const lines = res.stderr.trim().split('\n');
        equal(lines.length, 1, `one stderr line: ${where}`);
        ok(lines[0].startsWith('error: '), where);
        ok(namesAFlag(lines[0], c.argv), `the error names a flag: ${where}`);
      } else if (c.command === 'train') ok(!c.bad.length, where);
      if (c.command === 'plan') {
        const inProcess = await outcome(c);
        if (inProcess.error) {
          equal(
            res.stderr.trim(),
            `error: ${(inProcess.error as Error).message.split('\n').join(' ')}`,
            `same error in and out of process: ${where}`,
          );
        }
      }
    }
    const trained = cases.filter((c, i) => c.command === 'train' && results[i].code === 0).length;
    ok(trained >= 5, `${trained} of the train runs trained`);
    const slowest = results.reduce((a, x, i) => (x.s > results[a].s ? i : a), 0);
    console.log(
      `${cases.length} subprocesses in ${((performance.now() - started) / 1000).toFixed(1)} s; slowest ${
        results[slowest].s.toFixed(1)
      } s: ${show(cases[slowest])}`,
    );
    await Deno.remove(dir, { recursive: true });
  },
});
