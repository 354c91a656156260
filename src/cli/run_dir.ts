/** A run directory on disk (DESIGN.md §8): metrics.jsonl, config.json, ckpt.safetensors. */
import type { TrainConfig } from '../train/config.ts';
import { makeTokenizer, type Tokenizer, type TokenizerJSON, tokenizerFromJSON } from '../data/tokenizer.ts';
import { MixtureDataset, parseDataSpec } from '../data/mixture.ts';

/**
 * Config keys a resumed run may change: they do not alter the model or the data order. The
 * schedule keys are here so a finished run can be continued with a re-warm (continual
 * pre-training: `--resume --steps N --schedule rewarm-cosine --lr X`).
 */
export const RESUMABLE_KEYS: ReadonlySet<string> = new Set([
  'steps', 'logInterval', 'evalInterval', 'ckptInterval', 'sampleTokens', 'temperature', 'topK', 'peakTflops',
  'schedule', 'lr', 'minLr', 'warmup', 'decaySteps', 'cooldownFrac', 'cooldownShape', 'rewarmStart', 'rewarmFrom',
  // Continual pre-training changes the data (a new corpus, or a replay mixture); the tokenizer
  // stays the checkpoint's, and the batch order stays a function of (seed, step, data).
  'data', 'ckptSchedule',
]);

/**
 * Checks that a resumed run's flags only change what {@link RESUMABLE_KEYS} allows.
 * @throws Error naming the flags that would change the saved config, and the allowed ones.
 */
export function checkResumeOverrides(args: { overrides: Record<string, unknown>; configFile?: string }): void {
  const bad = Object.keys(args.overrides).filter((k) => !RESUMABLE_KEYS.has(k));
  if (bad.length || args.configFile) {
    throw new Error(`--resume continues the saved config; these flags would change it: ${bad.map((k) => `--${k}`).join(', ') || '--config'} (allowed: ${[...RESUMABLE_KEYS].join(', ')})`);
  }
}

/** Temp files of {@link writeAtomic} calls not yet renamed into place. */
const inFlight = new Set<string>();

/** Writes bytes atomically: a temp file in the same folder, synced, then renamed over the target. */
export async function writeAtomic(path: string, bytes: Uint8Array): Promise<void> {
  const tmp = `${path}.${crypto.randomUUID().slice(0, 8)}.tmp`;
  inFlight.add(tmp);
  try {
    const f = await Deno.open(tmp, { write: true, create: true, truncate: true });
    try {
      let off = 0;
      while (off < bytes.length) off += await f.write(bytes.subarray(off));
      await f.syncData();
    } finally {
      f.close();
    }
    await Deno.rename(tmp, path);
  } finally {
    inFlight.delete(tmp);
  }
}

/**
 * Removes the temp files of writes still in flight, for a process about to exit mid-write (a
 * second Ctrl-C): their targets keep their previous content.
 */
export function removeInFlightWrites(): void {
  for (const tmp of inFlight) {
    try {
      Deno.removeSync(tmp);
    } catch {
      // not created yet, or already renamed
    }
  }
  inFlight.clear();
}

/** The temp-file name {@link writeAtomic} writes before its rename. */
const TEMP_WRITE = /\.[0-9a-f]{8}\.tmp$/;

/**
 * Removes the temp files of atomic writes that a killed process left in run directory `dir`
 * (and its `ckpt-parallel-*` folders): kill -9 mid-write leaves `<file>.<hex8>.tmp` beside a
 * target that still holds its previous content. Returns the paths removed. Call it before a
 * run writes into `dir`; a run directory has one writer.
 */
export async function sweepTempWrites(dir: string): Promise<string[]> {
  const removed: string[] = [];
  const sweep = async (d: string, depth: number) => {
    for await (const e of Deno.readDir(d)) {
      const path = `${d}/${e.name}`;
      if (e.isFile && TEMP_WRITE.test(e.name)) await Deno.remove(path).then(() => removed.push(path), () => {});
      else if (e.isDirectory && depth === 0 && e.name.startsWith('ckpt-parallel-')) await sweep(path, 1);
    }
  };
  if (await exists(dir)) await sweep(dir, 0);
  return removed;
}

export async function exists(path: string): Promise<boolean> {
  try {
    await Deno.stat(path);
    return true;
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) return false;
    throw e;
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

/** The project root, for the shipped data when the CLI runs from another folder. */
const PROJECT_ROOT = new URL('../../', import.meta.url);

/**
 * Reads a UTF-8 text file for training. A relative path that does not exist from the
 * current folder is tried from the project root too, so the shipped data is found wherever
 * the CLI is started.
 * @throws Error naming the file when it is missing, not UTF-8 or empty.
 */
export async function readCorpus(path: string): Promise<string> {
  if (!path.startsWith('/') && !(await exists(path))) {
    const fromRoot = new URL(path, PROJECT_ROOT).pathname;
    if (await exists(fromRoot)) path = fromRoot;
  }
  let bytes: Uint8Array;
  try {
    bytes = await Deno.readFile(path);
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) throw new Error(`Data file '${path}' not found (--data expects a UTF-8 text file)`);
    throw new Error(`Cannot read data file '${path}': ${(e as Error).message}`);
  }
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    throw new Error(`Data file '${path}' is not valid UTF-8 text`);
  }
  if (text.startsWith('\uFEFF')) text = text.slice(1);
  if (!text.length) throw new Error(`Data file '${path}' is empty`);
  return text;
}

/**
 * Reads the corpora of a data spec (`a.txt` or `a.txt:0.95,b.txt:0.05`) and tokenises them.
 * A new char tokenizer's vocabulary is the union of the characters of every file, so any mix
 * (and a later re-weighting of the same files) encodes with it; a resumed run passes its
 * checkpoint's tokenizer instead.
 * @throws Error naming a file that is missing, empty, not UTF-8, too short, or holds a
 *   character outside the given tokenizer; or a malformed spec (see parseDataSpec).
 */
export async function loadTrainingData(cfg: Pick<TrainConfig, 'data' | 'tokenizer' | 'blockSize' | 'valFraction'>, saved: TokenizerJSON | null = null): Promise<{ tokenizer: Tokenizer; data: MixtureDataset; texts: string[] }> {
  const sources = parseDataSpec(cfg.data);
  const texts = await Promise.all(sources.map((s) => readCorpus(s.path)));
  const tokenizer = saved ? await tokenizerFromJSON(saved) : await makeTokenizer(cfg.tokenizer, texts.join(''));
  const corpora = sources.map((s, i) => {
    let tokens: Int32Array;
    try {
      tokens = tokenizer.encode(texts[i]);
    } catch (e) {
      throw new Error(`data file '${s.path}': ${(e as Error).message} (the run's tokenizer was built from other data)`);
    }
    return { name: sources.length === 1 ? `data file '${s.path}'` : s.path, tokens, weight: s.weight };
  });
  return { tokenizer, data: MixtureDataset.fromTokens(corpora, cfg.blockSize, cfg.valFraction), texts };
}
