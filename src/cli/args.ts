/**
 * Command-line flags for the training config, derived from the zod schema so every config
 * key is a kebab-case flag (`nLayer` → `--n-layer`). Parsing is node:util's parseArgs in
 * strict mode: an unknown flag is an error, not a silent no-op.
 */
import { parseArgs } from 'node:util';
import { z } from 'zod';
import { PRESETS, TrainConfigSchema } from '../train/config.ts';

const DEFAULTS = TrainConfigSchema.parse({});
type Key = keyof typeof DEFAULTS;

export const kebab = (s: string) => s.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);

/** Flags that are not config keys. */
const EXTRA = {
  preset: { type: 'string' },
  config: { type: 'string' },
  gpu: { type: 'string' },
  out: { type: 'string' },
  resume: { type: 'boolean' },
  'resume-step': { type: 'string' },
  // The short spellings of two recipes: --neftune α, --goldfish k,h.
  neftune: { type: 'string' },
  goldfish: { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

export interface ParsedTrainArgs {
  /** Config values given on the command line (camelCase keys, typed). */
  overrides: Record<string, unknown>;
  preset: string;
  configFile?: string;
  gpu: string;
  out?: string;
  resume: boolean;
  /** With --resume: continue from the kept checkpoint ckpt-<step> instead of the latest one. */
  resumeStep?: number;
  help: boolean;
  /** Values of the caller's own extra flags (see `more`), by flag name. */
  extra: Record<string, string | boolean | undefined>;
}

/**
 * Parses `argv`. `more` adds flags of another command (e.g. the schedule preview's --svg);
 * their values come back in `extra`.
 * @throws Error for an unknown flag, a missing value, a number that does not parse or an
 *   unknown preset, naming the flag and what is allowed.
 */
export function parseTrainArgs(argv: string[], more: Record<string, { type: 'string' | 'boolean' }> = {}): ParsedTrainArgs {
  const options: Record<string, { type: 'string' | 'boolean'; short?: string }> = { ...EXTRA, ...more };
  const byFlag = new Map<string, Key>();
  for (const key of Object.keys(DEFAULTS) as Key[]) {
    const flag = kebab(key);
    byFlag.set(flag, key);
    options[flag] = { type: typeof DEFAULTS[key] === 'boolean' ? 'boolean' : 'string' };
    if (typeof DEFAULTS[key] === 'boolean') options[`no-${flag}`] = { type: 'boolean' };
  }
  let values: Record<string, string | boolean | undefined>;
  try {
    ({ values } = parseArgs({ args: argv, options, strict: true, allowPositionals: false }) as {
      values: Record<string, string | boolean | undefined>;
    });
  } catch (e) {
    throw new Error(`${(e as Error).message.split('\n')[0]} (see --help)`);
  }
  const overrides: Record<string, unknown> = {};
  for (const [flag, v] of Object.entries(values)) {
    if (v === undefined || flag in EXTRA || flag in more) continue;
    const negated = flag.startsWith('no-') && byFlag.has(flag.slice(3));
    const key = byFlag.get(negated ? flag.slice(3) : flag);
    if (!key) continue;
    const def = DEFAULTS[key];
    if (typeof def === 'number') {
      const n = Number(v);
      if (v === '' || !Number.isFinite(n)) throw new Error(`--${flag} expects a number, got '${v}'`);
      overrides[key] = n;
    } else if (typeof def === 'boolean') overrides[key] = !negated;
    else overrides[key] = v;
  }
  if (values.neftune !== undefined) {
    const a = Number(values.neftune);
    if (values.neftune === '' || !Number.isFinite(a)) throw new Error(`--neftune expects the noise α (a number ≥ 0, e.g. 5), got '${values.neftune}'`);
    overrides.neftuneAlpha = a;
  }
  if (values.goldfish !== undefined) {
    const m = /^(\d+)(?:,(\d+))?$/.exec(String(values.goldfish).trim());
    if (!m) throw new Error(`--goldfish expects k or k,h (whole numbers, e.g. 4,13), got '${values.goldfish}'`);
    overrides.goldfishK = Number(m[1]);
    if (m[2] !== undefined) overrides.goldfishH = Number(m[2]);
  }
  const preset = (values.preset as string | undefined) ?? 'tiny';
  const rs = values['resume-step'] as string | undefined;
  if (rs !== undefined && (!/^\d+$/.test(rs) || !values.resume)) {
    throw new Error(`--resume-step expects a step number of a kept checkpoint (ckpt-<step>.safetensors) and needs --resume, got '${rs}'`);
  }
  if (!(preset in PRESETS)) throw new Error(`Unknown preset '${preset}'; allowed: ${Object.keys(PRESETS).join(', ')}`);
  return {
    overrides,
    preset,
    configFile: values.config as string | undefined,
    gpu: (values.gpu as string | undefined) ?? 'auto',
    out: values.out as string | undefined,
    resume: values.resume === true,
    resumeStep: rs === undefined ? undefined : Number(rs),
    help: values.help === true,
    extra: Object.fromEntries(Object.keys(more).map((k) => [k, values[k]])),
  };
}

/** ` (one of a | b)` for an enum key, so --help shows e.g. every schedule; '' otherwise. */
function choices(key: Key): string {
  let t: unknown = TrainConfigSchema.shape[key];
  if (t instanceof z.ZodDefault) t = t.unwrap();
  return t instanceof z.ZodEnum ? `  (one of ${(t.options as string[]).join(' | ')})` : '';
}

/** The --help text: every flag with its default (and its choices, for enums) and what it does. */
export function trainHelp(): string {
  const lines = [
    'npm run train -- [flags]      train a model on WebGPU (Deno)',
    '',
    '  --preset NAME        ' + Object.keys(PRESETS).join(' | ') + ' (default tiny)',
    '  --config FILE        JSON file of config keys (camelCase), applied over the preset',
    '  --gpu B              auto | wgpu | dawn (default auto)',
    '  --out DIR            run directory (default runs/<preset>-<time>)',
    '  --resume             continue the run in --out from its checkpoint',
    '  --resume-step N      with --resume: start from the kept ckpt-N.safetensors (--ckpt-schedule pythia)',
    '  --neftune A          short for --neftune-alpha A',
    '  --goldfish K,H       short for --goldfish-k K --goldfish-h H',
    '  --dp --tp --pp --cp --ep --zero --sp --micro-batches --pp-schedule --net',
    '                       a parallel run on simulated ranks; `npm run train -- --dp 2 --help` lists them',
    '',
  ];
  for (const key of Object.keys(DEFAULTS) as Key[]) {
    const desc = TrainConfigSchema.shape[key].description ?? '';
    lines.push(`  --${kebab(key).padEnd(19)} ${(JSON.stringify(DEFAULTS[key]) + choices(key)).padEnd(24)} ${desc}`);
  }
  return lines.join('\n');
}
