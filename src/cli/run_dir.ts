/** A run directory on disk (docs/design.md#run-outputs): metrics.jsonl, config.json, ckpt.safetensors. */
import { kebab } from './flags.ts';
import { exists, writeAtomic } from '../io/atomic.ts';

/**
 * Config keys a resumed run may change: they do not alter the model or the data order. The
 * schedule keys are here so a finished run can be continued with a re-warm (continual
 * pre-training: `--resume --steps N --schedule rewarm-cosine --lr X`).
 */
export const RESUMABLE_KEYS: ReadonlySet<string> = new Set([
  'steps',
  'logInterval',
  'evalInterval',
  'ckptInterval',
  'sampleTokens',
  'temperature',
  'topK',
  'peakTflops',
  'schedule',
  'lr',
  'minLr',
  'warmup',
  'decaySteps',
  'cooldownFrac',
  'cooldownShape',
  'rewarmStart',
  'rewarmFrom',
  // Continual pre-training changes the data (a new corpus, or a replay mixture); the tokenizer
  // stays the checkpoint's, and the batch order stays a function of (seed, step, data).
  'data',
  'ckptSchedule',
]);

/** `7`, `'cosine'`, `true`: a config value as a command line would give it. */
const shown = (v: unknown) => (typeof v === 'string' ? `'${v}'` : JSON.stringify(v));

/**
 * Checks that a resumed run's flags (and --config file) change only what {@link RESUMABLE_KEYS}
 * allows. A value equal to the saved one changes nothing, so a run's own command with `--resume`
 * appended is accepted.
 * @param given config keys given on the command line (`overrides`) and in the --config file.
 * @param saved the checkpoint's config.
 * @throws Error naming each flag (or --config key) that would change the saved config, with the
 *   saved and the given value, and the flags a resume may change.
 */
export function checkResumeOverrides(
  given: { overrides: Record<string, unknown>; configFile?: string; file?: Record<string, unknown> },
  saved: Record<string, unknown>,
): void {
  const values = { ...given.file, ...given.overrides };
  const changed = Object.keys(values).filter((k) =>
    !RESUMABLE_KEYS.has(k) && JSON.stringify(values[k]) !== JSON.stringify(saved[k])
  );
  if (!changed.length) return;
  const named = changed.map((k) => {
    const where = k in given.overrides ? `--${kebab(k)}` : `--config ${given.configFile} ${k}`;
    return `${where} ${shown(values[k])} (saved ${shown(saved[k])})`;
  });
  throw new Error(
    `--resume continues the saved config; these flags would change it: ${named.join(', ')} (a resume may change: ${
      [...RESUMABLE_KEYS].map((k) => `--${kebab(k)}`).join(', ')
    })`,
  );
}

/** Paths of a run's files. */
export function runFiles(dir: string) {
  return {
    dir,
    checkpoint: `${dir}/ckpt.safetensors`,
    metrics: `${dir}/metrics.jsonl`,
    config: `${dir}/config.json`,
    sample: `${dir}/sample.txt`,
    data: `${dir}/data.json`,
    /** A Pythia-schedule checkpoint kept beside the latest one. */
    checkpointAt: (step: number) => `${dir}/ckpt-${step}.safetensors`,
  };
}

/** Keeps only metrics lines with `step` < `before` (a resumed run rewrites what follows). */
export async function truncateMetrics(path: string, before: number): Promise<void> {
  if (!(await exists(path))) return;
  const kept = (await Deno.readTextFile(path))
    .split('\n')
    .filter((l) => l.trim() && (JSON.parse(l).step ?? Infinity) < before);
  await writeAtomic(path, new TextEncoder().encode(kept.map((l) => l + '\n').join('')));
}
