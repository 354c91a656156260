/**
 * Fuzzes the flags of `npm run train` and `npm run plan` (seeded, so a failure reproduces):
 * random combinations of valid values, blanks, whitespace, hex, huge numbers, negatives,
 * NaN/Infinity, unknown flags, missing values and booleans with values. In process, through
 * the entries the CLIs use (checkCommand, plan's planFromArgs), every outcome must be a config
 * or an Error naming an offending flag — never a TypeError/RangeError, never a blank read as 0.
 * As subprocesses, every run must exit 0, or 1 with one `error:` line naming the flag and no
 * stack trace or crash. The command lines come from fuzz_cases.ts.
 */
import { equal, ok } from 'node:assert/strict';
import { parseDecimal } from '../../src/cli/flags.ts';
import { Random } from '../../src/util/random.ts';
import { runCli } from '../util/cli.ts';
import { type Case, configFiles, namesAFlag, outcome, randomCase, show, trainFlags } from './fuzz_cases.ts';

/** FUZZ_SEED=n explores other command lines; CI runs the fixed seed. */
const SEED = parseDecimal(Deno.env.get('FUZZ_SEED') ?? '') ?? 0x5eed;
const IN_PROCESS = 1200;

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
        const k of trainFlags.filter((k) =>
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
      // A negative number is a value to range-check (`--dp -1 is below the minimum 1`), not a flag.
      ok(!/argument is ambiguous/.test(error.message), `${show(c)}: ${error.message}`);
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
