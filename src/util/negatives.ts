/**
 * Negative numbers on a command line: a flag's value, never a flag. node:util's parseArgs
 * refuses `--dp -1` as "argument is ambiguous" without naming the value; these helpers let each
 * flag's own check name its range instead. Runtime-neutral (the page's form imports flags.ts).
 */

/** A negative number's text (`-1`, `-0.5`, `-.5`, `-1e9`, `-Infinity`): a flag's value, never a flag. */
const NEGATIVE = /^-(?:\d|\.\d|Infinity$)/;

/** True for a token parseArgs reads as a flag: `--x`, `-h`, but not a negative number. */
export const isFlagToken = (a: string) => a.startsWith('-') && !NEGATIVE.test(a);

/**
 * `argv` with each negative number after a flag taking a value joined to it (`--dp -1` →
 * `--dp=-1`), which parseArgs would otherwise refuse as "argument is ambiguous" without naming
 * the value; the flag's own check then names its range (`--dp -1 is below the minimum 1`).
 * @param takesValue names of the flags that take a value (without `--`).
 * @throws Error for a flag taking a value followed by another flag (`--steps --lr 1`), naming both,
 *   where parseArgs would call it ambiguous.
 */
export function joinNegatives(argv: string[], takesValue: Set<string>): string[] {
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--') {
      out.push(...argv.slice(i));
      break;
    }
    const m = /^--([^=]+)$/.exec(a), next = argv[i + 1];
    if (!m || !takesValue.has(m[1]) || next === undefined || !next.startsWith('-')) out.push(a);
    else if (NEGATIVE.test(next)) out.push(`${a}=${argv[++i]}`);
    else {
      throw new Error(
        next.startsWith('--')
          ? `${a} expects a value, got the flag '${next}'`
          : `${a} expects a value, got '${next}' (a value starting with '-' is written ${a}=${next})`,
      );
    }
  }
  return out;
}
