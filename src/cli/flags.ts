/**
 * Command-line flags derived from zod object schemas: every key is a kebab-case flag
 * (`nLayer` → `--n-layer`), its text is converted by one strict number parser and then
 * validated by the key's own schema, and errors name the flag and what is allowed.
 */
import { z } from 'zod';
import { firstIssue, issueText, parseDecimal } from '../util/issue_text.ts';
import { isFlagToken } from '../util/negatives.ts';

// Re-exported: the CLI's importers read them here; the browser form imports util/ directly.
export { firstIssue, issueText, parseDecimal };

export const kebab = (s: string) => s.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);

/** A zod schema unwrapped from its default / optional wrappers. */
function inner(field: z.ZodType): z.ZodType {
  let t = field;
  while (t instanceof z.ZodDefault || t instanceof z.ZodOptional) t = t.unwrap() as z.ZodType;
  return t;
}

export type FlagKind = 'number' | 'boolean' | 'string';

/** How a key's flag takes its value: numbers and number literals convert their text, booleans take none. */
export function kindOf(field: z.ZodType): FlagKind {
  const t = inner(field);
  if (t instanceof z.ZodNumber) return 'number';
  if (t instanceof z.ZodBoolean) return 'boolean';
  if (t instanceof z.ZodUnion && t.options.every((o) => o instanceof z.ZodLiteral && typeof o.value === 'number')) {
    return 'number';
  }
  return 'string';
}

/** `an integer ≥ 1` / `a number` — what a numeric key accepts, for messages about unreadable text. */
function expectation(field: z.ZodType): string {
  const t = inner(field);
  if (!(t instanceof z.ZodNumber)) return 'a number';
  const lo = t.minValue !== null && t.minValue > -Number.MAX_SAFE_INTEGER ? ` ≥ ${t.minValue}` : '';
  return t.isInt ? `an integer${lo}` : `a number${lo}`;
}

/** Allowed values of an enum or literal union, or undefined. */
export function choicesOf(field: z.ZodType): string[] | undefined {
  const t = inner(field);
  if (t instanceof z.ZodEnum) return t.options.map(String);
  if (t instanceof z.ZodUnion && t.options.every((o) => o instanceof z.ZodLiteral)) {
    return t.options.map((o) => String((o as z.ZodLiteral).value));
  }
  return undefined;
}

/** One flag of a schema: its config key, kebab name, schema and how it takes its value. */
export interface FlagKey {
  key: string;
  flag: string;
  field: z.ZodType;
  kind: FlagKind;
}

/** Every key of `schema` as a flag. */
export function flagKeys(schema: z.ZodObject): FlagKey[] {
  return Object.entries(schema.shape).map(([key, field]) => ({
    key,
    flag: kebab(key),
    field: field as z.ZodType,
    kind: kindOf(field as z.ZodType),
  }));
}

/** node:util parseArgs options of `keys`: booleans also get their `--no-` form. */
export function parseArgsOptions(keys: FlagKey[]): Record<string, { type: 'string' | 'boolean' }> {
  const out: Record<string, { type: 'string' | 'boolean' }> = {};
  for (const k of keys) {
    out[k.flag] = { type: k.kind === 'boolean' ? 'boolean' : 'string' };
    if (k.kind === 'boolean') out[`no-${k.flag}`] = { type: 'boolean' };
  }
  return out;
}

/**
 * The typed value of flag `k` given as `raw` (parseArgs' string, or true for a boolean flag;
 * `negated` for its `--no-` form), validated by the key's schema.
 * @param describeRange say "expects an integer ≥ 1" rather than "expects a number" for unreadable text.
 * @throws Error naming the flag: unreadable number, out of range, not one of the choices.
 */
export function readFlag(k: FlagKey, raw: string | boolean, negated: boolean, describeRange = false): unknown {
  if (k.kind === 'boolean') return !negated;
  let value: unknown = raw;
  if (k.kind === 'number') {
    value = parseDecimal(String(raw));
    if (value === undefined) {
      throw new Error(`--${k.flag} expects ${describeRange ? expectation(k.field) : 'a number'}, got '${raw}'`);
    }
  }
  const r = k.field.safeParse(value);
  if (!r.success) throw new Error(issueText(`--${k.flag}`, raw, firstIssue(r.error.issues)));
  return r.data;
}

/**
 * Rewrites the forms of a boolean flag that parseArgs refuses into ones it reads:
 * `--bias=false` / `--bias false` → `--no-bias`, `--bias=true` / `--bias true` → `--bias`
 * (a boolean without a `--no-` form is simply left out when false).
 * @param booleans flag names taking no value (their `no-` forms included); strings: those taking one.
 * @throws Error naming the flag for any other value, e.g. `--bias=yes` or `--sp 1`.
 */
export function normalizeBooleans(argv: string[], booleans: Set<string>, strings: Set<string>): string[] {
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--') {
      out.push(...argv.slice(i));
      break;
    }
    const m = /^--([^=]+)(?:=([\s\S]*))?$/.exec(a);
    if (!m || !booleans.has(m[1])) {
      out.push(a);
      // A string flag's value is its own token even when it reads `true` (`--data true`).
      if (m && strings.has(m[1]) && m[2] === undefined && i + 1 < argv.length && !isFlagToken(argv[i + 1])) {
        out.push(argv[++i]);
      }
      continue;
    }
    const name = m[1];
    let value = m[2];
    if (value === undefined && i + 1 < argv.length && !isFlagToken(argv[i + 1])) value = argv[++i];
    if (value === undefined) {
      out.push(a);
      continue;
    }
    if (name.startsWith('no-') && booleans.has(name.slice(3))) {
      throw new Error(`--${name} takes no value, got '${value}' (use --${name.slice(3)}=true or --${name})`);
    }
    if (value !== 'true' && value !== 'false') {
      throw new Error(`--${name} expects true or false (or no value), got '${value}'`);
    }
    if (value === 'true') out.push(`--${name}`);
    else if (booleans.has(`no-${name}`)) out.push(`--no-${name}`);
  }
  return out;
}

/** ` (one of a | b)`, ` (max 65536)`: what --help adds after a key's default. */
function helpHint(field: z.ZodType): string {
  const choices = choicesOf(field);
  if (choices) return `  (one of ${choices.join(' | ')})`;
  const t = inner(field);
  return t instanceof z.ZodNumber && t.maxValue !== null && t.maxValue < Number.MAX_SAFE_INTEGER
    ? `  (max ${t.maxValue})`
    : '';
}

/** --help lines of a schema's flags: `--bias / --no-bias`, the default (or `unset`) with choices or maximum, the description. */
export function helpLines(keys: FlagKey[]): string[] {
  return keys.map((k) => {
    const label = k.kind === 'boolean' ? `${k.flag} / --no-${k.flag}` : k.flag;
    const def = k.field instanceof z.ZodDefault ? JSON.stringify(k.field.parse(undefined)) : 'unset';
    return `  --${label.padEnd(19)} ${(def + helpHint(k.field)).padEnd(24)} ${k.field.description ?? ''}`;
  });
}
