/**
 * User text in and out, for the CLI flags and the browser form alike: the one strict decimal
 * reader, and zod issues in words naming the flag or field (docs/design.md#input-validation).
 */
import type { z } from 'zod';

/** Decimal and exponent forms only: no blanks, whitespace, hex, `Infinity`, `NaN` or `1_000`. */
const DECIMAL = /^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$/;

/**
 * The number a flag's text spells, or undefined when it is not a finite decimal
 * (`' '`, `'0x10'`, `'Infinity'`, `'1e999'` all are undefined; `Number` would read `' '` as 0).
 */
export function parseDecimal(text: string): number | undefined {
  if (!DECIMAL.test(text)) return undefined;
  const n = parseFloat(text);
  return Number.isFinite(n) ? n : undefined;
}

/**
 * One zod issue in words, naming `name` (a flag or a config key) and the offending value:
 * `--n-embd 1000000000 exceeds the maximum 65536`, `--pp-schedule must be one of …, got 'x'`.
 */
export function issueText(name: string, value: unknown, issue: z.core.$ZodIssue): string {
  const v = typeof value === 'string' ? value : JSON.stringify(value);
  switch (issue.code) {
    case 'too_big':
      return issue.inclusive
        ? `${name} ${v} exceeds the maximum ${issue.maximum}`
        : `${name} ${v} must be below ${issue.maximum}`;
    case 'too_small':
      return issue.inclusive
        ? `${name} ${v} is below the minimum ${issue.minimum}`
        : `${name} ${v} must be above ${issue.minimum}`;
    case 'invalid_type':
      return issue.expected === 'int'
        ? `${name} expects an integer, got '${v}'`
        : `${name} expects ${issue.expected === 'number' ? 'a number' : `a ${issue.expected}`}, got '${v}'`;
    case 'invalid_value':
      return `${name} must be one of ${issue.values.map(String).join(', ')}, got '${v}'`;
    case 'invalid_union': {
      const values = issue.errors.flat().flatMap((i) => (i.code === 'invalid_value' ? i.values.map(String) : []));
      return `${name} must be one of ${values.join(', ')}, got '${v}'`;
    }
    default:
      return `${name} ${issue.message}`;
  }
}

/** The issue to report: zod's safe-integer bound only when no tighter bound fired. */
export const firstIssue = (issues: z.core.$ZodIssue[]) =>
  issues.find((i) => !(i.code === 'too_big' && 'note' in i && i.note)) ?? issues[0];
