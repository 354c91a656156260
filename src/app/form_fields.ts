/**
 * The Setup form's fields: which config keys the page asks for, grouped as they appear, their
 * kinds and hints (taken from the zod schema where it has them), the presets they start from,
 * and how parseConfig's message is split into per-field errors. Separate from form.ts, which
 * builds the form in the DOM and validates it, so the field table and its rules read without
 * the DOM code.
 */
import { z } from 'zod';
import { PRESETS, TrainConfigSchema, type TrainConfig } from '../train/config.ts';

export type Key = keyof TrainConfig;

export interface Field {
  key: Key;
  label: string;
  /** `int` fields accept whole numbers only; `float` accepts e.g. 3e-3; `choice` is a select. */
  kind: 'int' | 'float' | 'choice';
  hint?: string;
}

/**
 * The allowed values of an enum config key, read from the zod schema so the select offers
 * exactly what parseConfig accepts (a new schedule appears without touching the form).
 * @throws Error when `key` is not an enum in the schema.
 */
export function choicesOf(key: Key): string[] {
  let t: unknown = TrainConfigSchema.shape[key];
  if (t instanceof z.ZodDefault) t = t.unwrap();
  if (!(t instanceof z.ZodEnum)) throw new Error(`config key '${key}' is not an enum; allowed choice fields: schedule, cooldownShape, …`);
  return t.options as string[];
}

/** The schema's description of a key, shown as the field's hint. */
const describe = (key: Key) => TrainConfigSchema.shape[key].description;

/** Field groups as they appear on the page. */
export const FIELD_GROUPS: { legend: string; fields: Field[] }[] = [
  {
    legend: 'Model',
    fields: [
      { key: 'arch', label: 'Architecture', kind: 'choice', hint: 'gpt · linear (RWKV-style) · mamba · hybrid (Zamba-style) · gpt-moe · mamba-moe (MoE-Mamba)' },
      { key: 'nLayer', label: 'Layers', kind: 'int' },
      { key: 'nHead', label: 'Heads', kind: 'int', hint: 'must divide the width' },
      { key: 'nEmbd', label: 'Width', kind: 'int' },
      { key: 'blockSize', label: 'Block (context)', kind: 'int' },
      { key: 'recompute', label: 'Recompute', kind: 'choice', hint: describe('recompute') },
    ],
  },
  {
    legend: 'Optimisation',
    fields: [
      { key: 'steps', label: 'Steps', kind: 'int' },
      { key: 'batchSize', label: 'Batch', kind: 'int' },
      { key: 'lr', label: 'Learning rate', kind: 'float' },
      { key: 'warmup', label: 'Warmup steps', kind: 'int' },
    ],
  },
  {
    legend: 'Schedule and recipes',
    fields: [
      { key: 'schedule', label: 'LR schedule', kind: 'choice', hint: describe('schedule') },
      { key: 'minLr', label: 'Minimum LR', kind: 'float' },
      { key: 'cooldownFrac', label: 'Cooldown share', kind: 'float', hint: describe('cooldownFrac') },
      { key: 'cooldownShape', label: 'Cooldown shape', kind: 'choice' },
      { key: 'goldfishK', label: 'Goldfish k', kind: 'int', hint: describe('goldfishK') },
      { key: 'goldfishH', label: 'Goldfish h', kind: 'int', hint: describe('goldfishH') },
      { key: 'neftuneAlpha', label: 'NEFTune α', kind: 'float', hint: describe('neftuneAlpha') },
    ],
  },
  {
    legend: 'Logging',
    fields: [
      { key: 'logInterval', label: 'Log every', kind: 'int' },
      { key: 'evalInterval', label: 'Eval every', kind: 'int' },
      { key: 'evalBatches', label: 'Eval batches', kind: 'int' },
      { key: 'sampleTokens', label: 'Sample tokens', kind: 'int' },
    ],
  },
];

export const FIELDS: Field[] = FIELD_GROUPS.flatMap((g) => g.fields);
const FIELD_KEYS = new Set<string>(FIELDS.map((f) => f.key));

/** The defaults of every config key (parseConfig of an empty object). */
const DEFAULTS: TrainConfig = TrainConfigSchema.parse({});

/** A preset's values on top of the defaults. */
export function presetValues(name: string): TrainConfig {
  return { ...DEFAULTS, ...(PRESETS[name] ?? {}) };
}

/**
 * Splits parseConfig's message (`Invalid config: a: msg; b: msg` or a sentence naming keys)
 * into per-field errors. A line that names no form field stays in the summary only.
 */
export function fieldErrorsOf(message: string): Map<Key, string[]> {
  const out = new Map<Key, string[]>();
  const add = (k: Key, m: string) => out.set(k, [...(out.get(k) ?? []), m]);
  const body = message.replace(/^Invalid config:\s*/, '');
  for (const line of body.split(/;\s+/)) {
    const m = /^(\w+):\s*(.*)$/.exec(line);
    if (m && FIELD_KEYS.has(m[1])) {
      add(m[1] as Key, m[2]);
      continue;
    }
    // Cross-field rules ("nEmbd (65) must be divisible by nHead (2)") go to every field they name.
    for (const f of FIELDS) if (new RegExp(`\\b${f.key}\\b`).test(line)) add(f.key, line);
  }
  return out;
}
