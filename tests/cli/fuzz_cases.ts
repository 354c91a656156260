/**
 * The command lines tests/cli/fuzz.test.ts feeds `npm run train` and `npm run plan`: the values
 * it draws from (valid, blank, hex, huge, negative, unknown flags…), the seeded generator of one
 * command line, the in-process entry each command runs, and the check that an error names one
 * of the flags given. Separate from the test so its in-process and subprocess halves share one
 * generator and one notion of "names a flag".
 */
import { checkCommand, PlanCliSchema } from '../../src/cli/command.ts';
import { choicesOf, type FlagKey, flagKeys, parseDecimal } from '../../src/cli/flags.ts';
import { planFromArgs } from '../../src/cli/plan.ts';
import { TrainConfigSchema } from '../../src/train/config.ts';
import { PlanSchema } from '../../src/parallel/plan/plan_schema.ts';
import type { Random } from '../../src/util/random.ts';

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

/** The training flags a command line may carry (`--data` left out: the corpus is not fuzzed). */
export const trainFlags = flagKeys(TrainConfigSchema).filter((k) => k.key !== 'data');
const plan = flagKeys(PlanSchema);
const planCli = flagKeys(PlanCliSchema).filter((k) => k.key !== 'measure');
const choices = (k: FlagKey) => choicesOf(k.field) ?? [];

/** One fuzzed command line. */
export interface Case {
  command: 'train' | 'plan';
  argv: string[];
  /** Numeric flags given a text that is not a finite decimal. */
  bad: string[];
}

/** One random command line; `small` keeps worlds and pipelines small enough to print quickly. */
export function randomCase(r: Random, configs: string[], small = false): Case {
  const command = r.int(2) ? 'plan' : 'train';
  const argv: string[] = command === 'plan' && r.uniform() < 0.9 ? ['--vocab-size', '65'] : [];
  const bad: string[] = [];
  const pick = <T>(xs: readonly T[]) => xs[r.int(xs.length)];
  const pool = [...trainFlags, ...(command === 'plan' || r.int(2) ? plan : []), ...(command === 'plan' ? planCli : [])];
  const put = (flag: string, value: string) => {
    // Either spelling, negative numbers included: `--dp -1` must reach the flag's range check like `--dp=-1`.
    if (r.uniform() < 0.5) argv.push(`--${flag}=${value}`);
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

/** Words the parallel plan's rules (src/parallel/plan/plan.ts) use for a flag. */
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
export function namesAFlag(message: string, argv: string[]): boolean {
  return argv.filter((a) => a.startsWith('-')).map((a) => a.split('=')[0]).some((name) => {
    const bare = name.replace(/^-+/, '').replace(/^no-/, ''),
      camel = bare.replace(/-([a-z])/g, (_, c: string) => c.toUpperCase());
    const word = (w: string) => new RegExp(`(^|[^\\w-])${w}([^\\w-]|$)`).test(message);
    return message.includes(name) || (camel.length > 1 && message.includes(camel)) || word(bare) ||
      (bare in RULE_WORDS && word(RULE_WORDS[bare]));
  });
}

/** The in-process entry of each command: plan's planFromArgs, train's checkCommand. */
export async function outcome(c: Case): Promise<{ error?: unknown; cfg?: Record<string, unknown> | null }> {
  try {
    if (c.command === 'plan') return { cfg: (await planFromArgs(c.argv)).cfg };
    return { cfg: (await checkCommand(c.argv, 'train')).cfg };
  } catch (error) {
    return { error };
  }
}

/** The command line of a case, for assertion messages. */
export const show = (c: Case) => `${c.command} ${JSON.stringify(c.argv)}`;

/**
 * Writes --config files of every kind (null, array, malformed, unknown keys, …) into `dir`;
 * returns their paths, one that does not exist and a blank one.
 */
export async function configFiles(dir: string): Promise<string[]> {
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
