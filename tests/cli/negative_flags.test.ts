/**
 * Negative numbers on every CLI, in both spellings (`--dp -1` and `--dp=-1`): read as numbers
 * and refused by the flag's range with its name and the value — never parseArgs' "argument is
 * ambiguous" — and accepted where a flag allows them (--rewarm-start, --rewarm-from).
 * In process through each CLI's parser (src/util/parse_cli.ts is the one they share), and as
 * subprocesses for the one-line `error:` a user sees.
 */
import { equal, match, rejects, throws } from 'node:assert/strict';
import { parseTrainArgs } from '../../src/cli/args.ts';
import { parseBenchArgs } from '../../src/cli/bench.ts';
import { parseCommandArgs } from '../../src/cli/command.ts';
import { main as experiment } from '../../src/cli/experiment.ts';
import { main as memorization } from '../../src/cli/memorization.ts';
import { parseSearchArgs } from '../../src/cli/plan_search.ts';
import { parseScaleArgs } from '../../src/cli/scale.ts';
import { parseCommArgs } from '../../src/bench/comm_args.ts';
import { parseDecodeArgs } from '../../src/bench/decode_cli.ts';
import { runCli } from '../util/cli.ts';

/** `[--flag, value]` and `[--flag=value]`. */
const both = (flag: string, value: string) => [[flag, value], [`${flag}=${value}`]];

Deno.test('negative numbers are read as numbers and refused by range, naming the flag and the value', async () => {
  const cases: [(argv: string[]) => unknown, string, string, RegExp][] = [
    [(a) => parseCommandArgs(a, 'parallel'), '--dp', '-1', /: --dp -1 is below the minimum 1$/],
    [parseTrainArgs, '--lr', '-1', /: --lr -1 must be above 0$/],
    [parseTrainArgs, '--n-layer', '-16', /: --n-layer -16 is below the minimum 1$/],
    [parseTrainArgs, '--seed', '-0.5', /: --seed expects an integer, got '-0\.5'$/],
    [parseTrainArgs, '--weight-decay', '-1e9', /: --weight-decay -1e9 is below the minimum 0$/],
    [parseTrainArgs, '--steps', '-Infinity', /: --steps expects a number, got '-Infinity'$/],
    [parseTrainArgs, '--neftune', '-1', /--neftune read as -1$/],
    [(a) => parseCommandArgs(a, 'plan'), '--forward-ms', '-0.5', /: --forward-ms -0\.5 is below the minimum 0$/],
    [(a) => parseSearchArgs(['--search', ...a]), '--world', '-8', /: --world -8 is below the minimum 1$/],
    [(a) => parseSearchArgs(['--search', ...a]), '--global-batch', '-1', /: --global-batch -1 is below the minimum 1$/],
    [parseBenchArgs, '--sizes', '-4', /: --sizes expects comma-separated positive integers, got '-4'$/],
    [parseScaleArgs, '--batch', '-2', /: --batch must be an integer ≥ 1, got '-2'$/],
    [parseCommArgs, '--step', '-1', /: --step must be an integer ≥ 2, got '-1'$/],
    [parseDecodeArgs, '--layers', '-3', /: --layers expects comma-separated integers in 1 … Infinity, got '-3'$/],
  ];
  for (const [parse, flag, value, pattern] of cases) {
    for (const argv of both(flag, value)) {
      throws(
        () => {
          const r = parse(argv) as { overrides?: Record<string, unknown> };
          // --neftune's range is the config's (parseConfig): its value must at least arrive as the number.
          if (flag === '--neftune') throw new Error(`--neftune read as ${r.overrides?.neftuneAlpha}`);
        },
        pattern,
        JSON.stringify(argv),
      );
    }
  }
  for (const argv of both('--seed', '-1')) {
    await rejects(
      memorization(['--checkpoint', 'none.safetensors', ...argv]),
      /^Error: --seed expects an integer ≥ 0, got '-1'$/,
    );
    await rejects(experiment(['depth', ...argv]), /^Error: --seed expects an integer ≥ 0, got '-1'$/);
  }
  // A boolean takes no number: named as such rather than as an unknown short option `-1`.
  throws(() => parseTrainArgs(['--bias', '-1']), /: --bias expects true or false \(or no value\), got '-1'/);
});

Deno.test('negative numbers are accepted where the flag allows them', () => {
  for (const argv of [...both('--rewarm-start', '-1'), ...both('--rewarm-from', '-1')]) {
    const key = argv[0].startsWith('--rewarm-start') ? 'rewarmStart' : 'rewarmFrom';
    equal(parseTrainArgs(argv).overrides[key], -1, JSON.stringify(argv));
  }
  // The value after a string flag is its own token even when it is a negative number.
  equal(parseTrainArgs(['--rewarm-from', '-1', '--steps', '9']).overrides.steps, 9);
  // A flag missing its value is refused naming both, not fed the next flag nor called ambiguous.
  throws(() => parseTrainArgs(['--steps', '--lr', '1']), /: --steps expects a value, got the flag '--lr'/);
  throws(
    () => parseBenchArgs(['--json', '-x']),
    /: --json expects a value, got '-x' \(a value starting with '-' is written --json=-x\)/,
  );
});

Deno.test({
  name: 'negative numbers as a user types them: one error line naming the flag, value and range',
  sanitizeResources: false,
  fn: async () => {
    const cases: [string, string[], RegExp][] = [
      ['plan.ts', ['--dp', '-1', '--vocab-size', '65'], /^error: --dp -1 is below the minimum 1$/],
      ['plan.ts', ['--search', '--world', '-8', '--model', 'gpt3-175b'], /^error: --world -8 is below the minimum 1$/],
      ['train.ts', ['--lr', '-1'], /^error: --lr -1 must be above 0$/],
    ];
    for (const [script, argv, pattern] of cases) {
      const r = await runCli(script, argv);
      equal(r.code, 1, r.stderr);
      match(r.stderr.trim(), pattern);
    }
  },
});
