/** A run directory on disk (docs/design.md §15): metrics.jsonl, config.json, ckpt.safetensors. */
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

/**
 * Checks that a resumed run's flags only change what {@link RESUMABLE_KEYS} allows.
 * @throws Error naming the flags that would change the saved config, and the allowed ones.
 */
export function checkResumeOverrides(args: { overrides: Record<string, unknown>; configFile?: string }): void {
  const bad = Object.keys(args.overrides).filter((k) => !RESUMABLE_KEYS.has(k));
  if (bad.length || args.configFile) {
    throw new Error(
      `--resume continues the saved config; these flags would change it: ${
        bad.map((k) => `--${kebab(k)}`).join(', ') || '--config'
      } (allowed: ${[...RESUMABLE_KEYS].map((k) => `--${kebab(k)}`).join(', ')})`,
    );
  }
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
