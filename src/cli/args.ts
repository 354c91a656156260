/**
 * Command-line flags for the training config, derived from the zod schema so every config
 * key is a kebab-case flag (`nLayer` → `--n-layer`), converted by one strict number parser and
 * validated by its own schema (flags.ts). Parsing is node:util's parseArgs in strict mode: an
 * unknown flag is an error, not a silent no-op.
 */
import { parseCliArgs } from '../util/parse_cli.ts';
import { z } from 'zod';
import { PRESETS, TrainConfigSchema } from '../train/config.ts';
import { parseSubgroupsFlag } from '../gpu/subgroups.ts';
import {
  type FlagKey,
  flagKeys,
  helpLines,
  kebab,
  normalizeBooleans,
  parseArgsOptions,
  parseDecimal,
  readFlag,
} from './flags.ts';

export { kebab };

const TRAIN_KEYS = flagKeys(TrainConfigSchema);

/** Flags that are not config keys. */
const EXTRA = {
  preset: { type: 'string' },
  config: { type: 'string' },
  gpu: { type: 'string' },
  out: { type: 'string' },
  resume: { type: 'boolean' },
  'resume-step': { type: 'string' },
  'allow-legacy-checkpoint': { type: 'boolean' },
  'init-from': { type: 'string' },
  adapter: { type: 'string' },
  subgroups: { type: 'string' },
  // Short spellings of two recipes: --neftune α, --goldfish k,h.
  neftune: { type: 'string' },
  goldfish: { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

const GPUS = ['auto', 'wgpu', 'dawn'] as const;

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
  /** With --resume: read a checkpoint that carries only the legacy data digest (still verified). */
  allowLegacyCheckpoint: boolean;
  /** A Hugging Face GPT-2 safetensors file whose weights a new run starts from (fine-tuning). */
  initFrom?: string;
  /** Dawn's adapter by name substring or index (src/gpu/dawn_adapters.ts). */
  adapter?: string;
  /** `--subgroups on|off`: the kernels' subgroup variants (src/gpu/context.ts; single-rank runs). */
  subgroups?: 'on' | 'off';
  help: boolean;
  /** Values of the caller's own extra flags (see `more`), by flag name. */
  extra: Record<string, string | boolean | undefined>;
  /** Values of the caller's schema keys (see `schema`) that were given, camelCase, typed and validated. */
  options: Record<string, unknown>;
}

/** A path flag's value: refused when blank, which would name the current directory or a file ' '. */
function path(flag: string, v: unknown): string | undefined {
  if (v === undefined) return undefined;
  if (String(v).trim() === '') throw new Error(`--${flag} expects a path, got '${v}'`);
  return String(v);
}

/** `--goldfish k` or `k,h` as whole numbers (validated as goldfishK / goldfishH by the config). */
const Goldfish = z.string().regex(/^\d+(?:,\d+)?$/).transform((s) => s.split(',').map((x) => parseDecimal(x)!));

/** The goldfishK (and goldfishH) a --goldfish value sets. */
function goldfish(text: string): Record<string, number> {
  const g = Goldfish.safeParse(text);
  if (!g.success) throw new Error(`--goldfish expects k or k,h (whole numbers, e.g. 4,13), got '${text}'`);
  return g.data.length > 1 ? { goldfishK: g.data[0], goldfishH: g.data[1] } : { goldfishK: g.data[0] };
}

/** `--neftune α` (validated as neftuneAlpha by the config). */
function neftune(text: string): number {
  const a = parseDecimal(text);
  if (a === undefined) throw new Error(`--neftune expects the noise α (a number ≥ 0, e.g. 5), got '${text}'`);
  return a;
}

const resumeStepError = (text: string) =>
  `--resume-step expects a step number of a kept checkpoint (ckpt-<step>.safetensors) and needs --resume, got '${text}'`;

/**
 * Parses `argv`. `more` adds raw flags of another command (e.g. the schedule preview's --svg),
 * whose values come back in `extra`; `schema` adds typed keys (e.g. the parallel plan's), each a
 * kebab-case flag validated like the config's, whose values come back in `options`.
 * Booleans read `--bias`, `--no-bias`, `--bias=false` and `--bias false`.
 * @throws Error for an unknown flag, a missing value, a number that does not parse (blank,
 *   hex, non-finite) or is out of its key's range, an unknown preset or GPU backend, naming the
 *   flag and what is allowed.
 */
export function parseTrainArgs(
  argv: string[],
  more: Record<string, { type: 'string' | 'boolean' }> = {},
  schema?: z.ZodObject,
): ParsedTrainArgs {
  const ownKeys = schema ? flagKeys(schema) : [];
  const byFlag = new Map<string, { k: FlagKey; own: boolean }>([
    ...TRAIN_KEYS.map((k) => [k.flag, { k, own: false }] as const),
    ...ownKeys.map((k) => [k.flag, { k, own: true }] as const),
  ]);
  const options: Record<string, { type: 'string' | 'boolean'; short?: string }> = {
    ...parseArgsOptions(TRAIN_KEYS),
    ...parseArgsOptions(ownKeys),
    ...EXTRA,
    ...more,
  };
  const names = (t: string) => new Set(Object.entries(options).filter(([, o]) => o.type === t).map(([n]) => n));
  let parsed: {
    values: Record<string, string | boolean | undefined>;
    tokens: { kind: string; name?: string; value?: string }[];
  };
  try {
    parsed = parseCliArgs({
      args: normalizeBooleans(argv, names('boolean'), names('string')),
      options,
      strict: true,
      allowPositionals: false,
      tokens: true,
    }) as typeof parsed;
  } catch (e) {
    throw new Error(`${(e as Error).message.split('\n')[0]} (see --help)`);
  }
  const { values } = parsed;
  const overrides: Record<string, unknown> = {}, typed: Record<string, unknown> = {};
  // Every occurrence is checked in order (the last one wins), so a bad value is never hidden by a later good one.
  for (const { kind, name: flag, value } of parsed.tokens) {
    if (kind !== 'option' || !flag || flag in more) continue;
    if (flag === 'neftune') overrides.neftuneAlpha = neftune(String(value));
    else if (flag === 'goldfish') Object.assign(overrides, goldfish(String(value)));
    else if (flag === 'preset' && !Object.hasOwn(PRESETS, String(value))) {
      throw new Error(`--preset: Unknown preset '${value}'; allowed: ${Object.keys(PRESETS).join(', ')}`);
    } else if (flag === 'gpu' && !(GPUS as readonly string[]).includes(String(value))) {
      throw new Error(`--gpu must be one of ${GPUS.join(', ')}, got '${value}'`);
    } else if (flag === 'resume-step' && !/^\d+$/.test(String(value))) throw new Error(resumeStepError(String(value)));
    if (flag in EXTRA) continue;
    const negated = flag.startsWith('no-') && byFlag.get(flag.slice(3))?.k.kind === 'boolean';
    const entry = byFlag.get(negated ? flag.slice(3) : flag);
    if (entry) (entry.own ? typed : overrides)[entry.k.key] = readFlag(entry.k, value ?? true, negated, entry.own);
  }
  const preset = (values.preset as string | undefined) ?? 'tiny';
  const rs = values['resume-step'] as string | undefined;
  const resumeStep = rs === undefined ? undefined : z.number().int().min(0).safeParse(parseDecimal(rs)).data;
  if (rs !== undefined && (resumeStep === undefined || !values.resume)) throw new Error(resumeStepError(rs));
  if (values['allow-legacy-checkpoint'] && !values.resume) {
    throw new Error('--allow-legacy-checkpoint reads an old checkpoint and needs --resume');
  }
  if (values['init-from'] !== undefined && values.resume) {
    throw new Error(
      '--init-from starts a new run from a GPT-2 checkpoint and --resume continues one: give one of them',
    );
  }
  const gpu = (values.gpu as string | undefined) ?? 'auto';
  const sg = parseSubgroupsFlag(values.subgroups as string | undefined);
  return {
    overrides,
    preset,
    configFile: path('config', values.config),
    gpu,
    out: path('out', values.out),
    resume: values.resume === true,
    resumeStep,
    allowLegacyCheckpoint: values['allow-legacy-checkpoint'] === true,
    initFrom: path('init-from', values['init-from']),
    adapter: values.adapter as string | undefined,
    subgroups: sg,
    help: values.help === true,
    extra: Object.fromEntries(Object.keys(more).map((k) => [k, values[k]])),
    options: typed,
  };
}

/** The --help text: every flag with its default (and its choices or maximum) and what it does. */
export function trainHelp(): string {
  const lines = [
    'npm run train -- [flags]      train a model on WebGPU (Deno)',
    '',
    '  --preset NAME        ' + Object.keys(PRESETS).join(' | ') + ' (default tiny)',
    '  --config FILE        JSON object of config keys (camelCase), applied over the preset',
    '  --gpu B              auto | wgpu | dawn (default auto)',
    '  --adapter NAME|N     on a machine with several GPUs: the adapter whose name contains NAME, or the N-th Dawn finds (Dawn)',
    '  --subgroups on|off   subgroup kernel variants where the adapter has them (default off: slower on the GPU measured)',
    '  --out DIR            run directory (default runs/<preset>-<time>)',
    '  --resume             continue the run in --out from its checkpoint',
    '  --resume-step N      with --resume: start from the kept ckpt-N.safetensors (--ckpt-schedule pythia)',
    '  --allow-legacy-checkpoint',
    '                       with --resume: read a checkpoint written before whole-file digests (its data_sha256 is still verified)',
    '  --init-from FILE     start from a Hugging Face GPT-2 safetensors file (fine-tuning; --tokenizer gpt2 for its vocabulary)',
    '  --neftune A          short for --neftune-alpha A',
    '  --goldfish K,H       short for --goldfish-k K --goldfish-h H',
    '  --dp --tp --pp --cp --ep --zero --sp --micro-batches --pp-schedule --net',
    '                       a parallel run on simulated ranks; `npm run train -- --dp 2 --help` lists them',
    '  a boolean key reads --bias, --no-bias, --bias=false or --bias false; numbers are decimals (1e-3), never blank or hex',
    '',
    ...helpLines(TRAIN_KEYS),
  ];
  return lines.join('\n');
}
