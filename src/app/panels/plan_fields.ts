/**
 * The parallel Setup's fields, read from the CLI's one zod `PlanSchema`
 * (src/parallel/plan/plan_schema.ts): each key's kind, default, allowed values, bounds and help
 * text come from the schema, so the page offers exactly what `npm run train -- --dp …` accepts.
 * Typed values become a plan through the CLI's own `planFromOptions` (micro-batches default to
 * gradAccum, the world-size and pipeline maxima) and then the plan's rules (`planProblems`, plan/rules.ts) against the model.
 * No DOM here: tests/app/plan_fields.test.ts runs it under Deno.
 */
import { z } from 'zod';
import { firstIssue, issueText, parseDecimal } from '../../util/issue_text.ts';
import { type ParallelPlan, type PlanModel, planProblems } from '../../parallel/plan/plan.ts';
import type { RunFacts } from '../../parallel/plan/rules.ts';
import { planFromOptions, type PlanOptions, PlanSchema } from '../../parallel/plan/plan_schema.ts';
import { MAX_RUN_WORLD } from '../../parallel/plan/limits.ts';

export type PlanKey = keyof PlanOptions;

/** One plan field as the page shows it. */
export interface PlanField {
  key: PlanKey;
  label: string;
  kind: 'int' | 'number' | 'boolean' | 'enum' | 'text';
  /** The values a select offers: an enum's options, a boolean's, or a small integer range (ZeRO's 0–3). */
  options?: string[];
  /** The schema's default as typed into the field; undefined: unset (the schema's description says what that means). */
  default?: string;
  /** The schema's description. */
  help: string;
  /** Typical values a text field offers (a datalist); any other value the schema accepts is fine too. */
  suggestions?: string[];
  min?: number;
  max?: number;
}

/** Short labels for the page; a key missing here shows under its schema name. */
export const PLAN_LABELS: Partial<Record<PlanKey, string>> = {
  dp: 'dp (data)', tp: 'tp (tensor)', pp: 'pp (pipeline)', cp: 'cp (context)', ep: 'ep (experts)', zero: 'ZeRO stage',
  sp: 'Sequence parallel', microBatches: 'Micro-batches', ppSchedule: 'Pipeline schedule', virtualStages: 'Virtual stages',
  cpKind: 'Context parallel', compress: 'Compression', net: 'Network', dataPlane: 'Data plane', regionMb: 'Ring MiB (shared plane)',
};

/**
 * Policies the compression field offers (docs/design.md#compressed-collectives-and-the-per-dimension-policy):
 * error-feedback schemes on dp, a cast everywhere, PowerSGD, and a hybrid. bf16 rather than fp16, which needs
 * shader-f16.
 */
export const PLAN_SUGGESTIONS: Partial<Record<PlanKey, string[]>> = {
  compress: ['none', 'dp=topk:0.1', 'dp=sign', 'dp=int8', 'dp=int4', 'dp=powersgd:4', 'naive:bf16', 'dp=topk:0.05,tp=bf16,pp=int8'],
};

/** Ranks a browser world runs: World.launch (src/comm/launch.ts) starts 1–16 rank workers. */
export const MAX_BROWSER_WORLD = 16;

/** Integer ranges up to this many values show as a select. */
const MAX_SELECT_RANGE = 8;

/** A zod schema unwrapped from its default / optional wrappers. */
function inner(field: z.ZodType): z.ZodType {
  let t = field;
  while (t instanceof z.ZodDefault || t instanceof z.ZodOptional) t = t.unwrap() as z.ZodType;
  return t;
}

const bound = (x: number | null) => (x !== null && Math.abs(x) < Number.MAX_SAFE_INTEGER ? x : undefined);

/** Every PlanSchema key as a field, in the schema's order. */
export function planFields(): PlanField[] {
  const defaults: Record<string, unknown> = PlanSchema.parse({});
  return Object.entries(PlanSchema.shape).map(([k, field]) => {
    const key = k as PlanKey, t = inner(field as z.ZodType), d = defaults[key];
    const f: PlanField = {
      key,
      label: PLAN_LABELS[key] ?? key,
      kind: 'text',
      default: d === undefined ? undefined : String(d),
      help: (field as z.ZodType).description ?? '',
      ...(PLAN_SUGGESTIONS[key] ? { suggestions: PLAN_SUGGESTIONS[key] } : {}),
    };
    if (t instanceof z.ZodEnum) return { ...f, kind: 'enum', options: t.options.map(String) };
    if (t instanceof z.ZodBoolean) return { ...f, kind: 'boolean', options: ['false', 'true'] };
    if (!(t instanceof z.ZodNumber)) return f;
    const min = bound(t.minValue), max = bound(t.maxValue);
    const small = t.isInt && min !== undefined && max !== undefined && max - min < MAX_SELECT_RANGE;
    return {
      ...f, kind: t.isInt ? 'int' : 'number', min, max,
      ...(small ? { options: Array.from({ length: max - min + 1 }, (_, i) => String(min + i)) } : {}),
    };
  });
}

/** `a whole number from 1 to 4096`: what a numeric field accepts. */
export function allowedText(f: PlanField): string {
  const what = f.kind === 'int' ? 'a whole number' : 'a number';
  if (f.min !== undefined && f.max !== undefined) return `${what} from ${f.min} to ${f.max}`;
  return f.min !== undefined ? `${what} ≥ ${f.min}` : f.max !== undefined ? `${what} ≤ ${f.max}` : what;
}

/** The page's key for a URL parameter: `schedule=gpipe` names the pipeline schedule (as the CLI's --schedule alias); other values of `schedule` stay the LR schedule's. */
export function planParamKey(key: string, value?: string): string {
  const pipeline = planFields().find((f) => f.key === 'ppSchedule')?.options ?? [];
  return key === 'schedule' && value !== undefined && pipeline.includes(value) ? 'ppSchedule' : key;
}

/** A plan that passed validation, with its world size and network description. */
export interface ParallelChoice {
  plan: ParallelPlan;
  worldSize: number;
  /**
   * The data plane asked for (unset: shared where the page is cross-origin isolated) and MiB per ring
   * (docs/design.md#the-shared-data-plane-of-worker-ranks).
   */
  dataPlane?: PlanOptions['dataPlane'];
  regionMb?: number;
  /** Bytes per ring the run gets: set by the page from the plan and model (plan_schema.ts planRegionBytes). */
  regionBytes?: number;
  /** Text for parseNetwork: a preset name or `intra=…;inter=…;node=…`. */
  net: string;
}

export type ParallelResult = { ok: true; choice: ParallelChoice } | { ok: false; problems: string[] };

/** The fields' text (blank: the schema's default), the network text and the world size. */
export type PlanValues = Partial<Record<PlanKey, string>> & { net: string; world?: string };

/** `--virtual-stages` → `virtualStages`: planFromOptions' messages name CLI flags, the page names its fields. */
const fieldNames = (message: string) => message.replace(/--([a-z]+(?:-[a-z]+)*)/g, (_, f: string) => f.replace(/-([a-z])/g, (_m, c: string) => c.toUpperCase()));

/**
 * The plan `values` describe, built by planFromOptions exactly as the CLI builds it, or the
 * problems in words, one per field (`dp must be a whole number from 1 to 4096, got '0'`).
 */
export function buildPlan(values: PlanValues, cfg: { gradAccum: number }): { ok: true; plan: ParallelPlan; options: Partial<PlanOptions> } | { ok: false; problems: string[] } {
  const options: Record<string, unknown> = {}, problems: string[] = [];
  const fields = planFields();
  for (const f of fields) {
    const raw = values[f.key]?.trim() ?? '';
    if (raw === '') continue;
    if (f.kind === 'int' || f.kind === 'number') {
      const n = parseDecimal(raw);
      if (n === undefined) problems.push(`${f.key} must be ${allowedText(f)}, got '${raw}'`);
      else options[f.key] = n;
    } else if (f.kind === 'boolean') options[f.key] = raw === 'true' ? true : raw === 'false' ? false : raw;
    else options[f.key] = raw;
  }
  // Every field's problem at once: the schema checks the readable ones even when another is not a number.
  const parsed = PlanSchema.safeParse(options);
  if (!parsed.success) problems.push(...issuesText(parsed.error, values, fields));
  const order = (p: string) => fields.findIndex((f) => p.startsWith(`${f.key} `));
  if (problems.length) return { ok: false, problems: problems.sort((a, b) => order(a) - order(b)) };
  try {
    return { ok: true, plan: planFromOptions(options as Partial<PlanOptions>, cfg, MAX_RUN_WORLD), options: options as Partial<PlanOptions> };
  } catch (e) {
    return { ok: false, problems: e instanceof z.ZodError ? issuesText(e, values, fields) : [fieldNames((e as Error).message)] };
  }
}

/** A zod error as one sentence per field: numbers say their range, enums their options, the network its parser's message. */
function issuesText(e: z.ZodError, values: PlanValues, fields: PlanField[]): string[] {
  const byKey = new Map<string, z.core.$ZodIssue[]>();
  for (const i of e.issues) byKey.set(String(i.path[0]), [...(byKey.get(String(i.path[0])) ?? []), i]);
  return [...byKey].map(([key, issues]) => {
    const f = fields.find((x) => x.key === key), raw = values[key as PlanKey]?.trim() ?? '';
    if (key === 'compress') return compressProblem(raw, firstIssue(issues).message);
    return f && (f.kind === 'int' || f.kind === 'number') ? `${key} must be ${allowedText(f)}, got '${raw}'` : issueText(key, raw, firstIssue(issues));
  });
}

/**
 * parseCompressPolicy's message as the field's problem, `compress '<text>': <why>`: the CLI's
 * `--compress …:` prefix and the scheme's own quoting go, since the field's text is quoted once.
 */
export function compressProblem(raw: string, message: string): string {
  let why = message.replace(/^--compress:?\s*/, '').replace(/^compression scheme '[^']*':\s*/, '');
  if (why.startsWith(`${raw}: `)) why = why.slice(raw.length + 2);
  return `compress '${raw}': ${why}`;
}

/**
 * Everything the Setup checks: the world size (1–16, equal to dp·pp·cp·tp), the plan built by
 * planFromOptions and, with a model, the plan's rules (planProblems: the one table the CLI and the plan search
 * run too, with the run's config `cfg.run` when given); every problem at once.
 * @param model the model the plan must fit; null while the Setup form above is invalid.
 */
export function checkPlan(
  values: PlanValues,
  model: PlanModel | null,
  cfg: { gradAccum: number; run?: RunFacts },
): ParallelResult {
  const problems: string[] = [];
  const w = values.world?.trim() ?? '', world = w === '' ? NaN : Number(w);
  const worldOk = Number.isInteger(world) && world >= 1 && world <= MAX_BROWSER_WORLD;
  if (!worldOk) problems.push(`world size must be a whole number from 1 to ${MAX_BROWSER_WORLD}, got ${w || 'nothing'}`);
  const built = buildPlan(values, cfg);
  if (!built.ok) problems.push(...built.problems);
  else if (model) problems.push(...planProblems(built.plan, model, Number.isInteger(world) ? world : undefined, cfg.run, MAX_RUN_WORLD));
  if (!model) problems.push('the model setup above is invalid');
  if (problems.length || !built.ok) return { ok: false, problems };
  const { dataPlane, regionMb } = built.options;
  // Only what was given: an absent choice takes the run's default (shared where it can run).
  return {
    ok: true,
    choice: {
      plan: built.plan,
      worldSize: world,
      net: values.net,
      ...(dataPlane !== undefined ? { dataPlane } : {}),
      ...(regionMb !== undefined ? { regionMb } : {}),
    },
  };
}
