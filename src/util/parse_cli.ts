/**
 * The one parseArgs every CLI calls (src/cli/*.ts, the bench suites' own flags): node:util's,
 * with negative numbers read as values. Apart from negatives.ts because node:util has no browser
 * build and the page imports flags.ts, which uses negatives.ts.
 */
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { joinNegatives } from './negatives.ts';

/**
 * node:util's parseArgs, reading a negative number after a flag that takes a value as that
 * value (negatives.ts joinNegatives): `--dp -1`, `--lr -1` and `--world -8` reach each flag's own
 * check, which names its range, and `--rewarm-from -1` is accepted, where parseArgs alone
 * refuses them all as "argument is ambiguous".
 * @throws as parseArgs: an unknown flag, a missing value.
 */
export function parseCliArgs<T extends ParseArgsConfig & { args: string[] }>(
  config: T,
): ReturnType<typeof parseArgs<T>> {
  const options = (config.options ?? {}) as Record<string, { type: string }>;
  const takesValue = new Set(Object.keys(options).filter((n) => options[n].type === 'string'));
  return parseArgs({ ...config, args: joinNegatives(config.args, takesValue) });
}
