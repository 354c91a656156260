/**
 * A parallel run's checkpoints on disk: one folder per checkpoint, `ckpt-parallel-<step>/`,
 * holding every rank's file (`rank-<r>.safetensors`, src/parallel/rank_checkpoint.ts), and the
 * manifest `ckpt-parallel.json` naming the latest complete set. A set is written file by file
 * (each atomically) into its own folder, and only then does the manifest move to it (temp file +
 * rename), so a run killed at any point leaves the manifest naming the last complete set; the
 * folder of the previous set is removed after the switch unless the Pythia schedule keeps it.
 */
import { exists, writeAtomic } from './run_dir.ts';
import { CorruptCheckpointError } from '../train/safetensors.ts';
import type { ParallelPlan } from '../parallel/plan.ts';

export const MANIFEST_FORMAT = 'webgpu-train-sandbox/parallel-checkpoint/1';

/** The manifest's content. */
export interface CheckpointManifest {
  format: string;
  /** Steps done when the set was taken (the resumed run continues here). */
  step: number;
  /** Folder of the set, relative to the run directory. */
  dir: string;
  /** One file per rank, index = world rank. */
  files: string[];
  plan: ParallelPlan;
  /** Whether the set is kept when a later one replaces it (Pythia schedule). */
  keep: boolean;
}

/** Paths of a run directory's parallel checkpoints. */
export const parallelCheckpointFiles = (outDir: string) => ({
  manifest: `${outDir}/ckpt-parallel.json`,
  dirAt: (step: number) => `ckpt-parallel-${step}`,
});

/**
 * Writes the world's rank files after `step` steps as a new set, then points the manifest at it
 * and removes the previous set (unless it was kept).
 * @throws (rejects with) file-system errors; the previous set stays named until the new one is complete.
 */
export async function saveCheckpointSet(outDir: string, step: number, shards: Uint8Array[], plan: ParallelPlan, keep: boolean): Promise<void> {
  const paths = parallelCheckpointFiles(outDir), dir = paths.dirAt(step);
  const previous = await readManifest(outDir).catch(() => null); // none yet, or unreadable: nothing to remove
  await Deno.mkdir(`${outDir}/${dir}`, { recursive: true });
  const files = shards.map((_, r) => `rank-${r}.safetensors`);
  for (const [r, bytes] of shards.entries()) await writeAtomic(`${outDir}/${dir}/${files[r]}`, bytes);
  const manifest: CheckpointManifest = { format: MANIFEST_FORMAT, step, dir, files, plan, keep };
  await writeAtomic(paths.manifest, new TextEncoder().encode(JSON.stringify(manifest, null, 2) + '\n'));
  if (previous && previous.dir !== dir && !previous.keep) await Deno.remove(`${outDir}/${previous.dir}`, { recursive: true }).catch(() => {});
}

/**
 * The manifest of `outDir`.
 * @throws Error when there is none ("no parallel checkpoint"), CorruptCheckpointError when it is unreadable.
 */
export async function readManifest(outDir: string): Promise<CheckpointManifest> {
  const path = parallelCheckpointFiles(outDir).manifest;
  if (!(await exists(path))) throw new Error(`--resume: no parallel checkpoint in ${outDir} (${path} is missing)`);
  let m: CheckpointManifest;
  try {
    m = JSON.parse(await Deno.readTextFile(path));
  } catch (e) {
    throw new CorruptCheckpointError(path, `not JSON: ${(e as Error).message}`);
  }
  if (m?.format !== MANIFEST_FORMAT) throw new CorruptCheckpointError(path, `format is '${m?.format}', expected '${MANIFEST_FORMAT}'`);
  if (!Number.isInteger(m.step) || m.step < 0 || !Array.isArray(m.files) || typeof m.dir !== 'string') {
    throw new CorruptCheckpointError(path, 'step, dir or files malformed');
  }
  return m;
}

/**
 * The latest complete set: its manifest and every rank's file.
 * @throws the errors of {@link readManifest}, and CorruptCheckpointError naming a missing rank file.
 */
export async function loadCheckpointSet(outDir: string): Promise<{ manifest: CheckpointManifest; shards: Uint8Array[] }> {
  const manifest = await readManifest(outDir);
  const shards: Uint8Array[] = [];
  for (const f of manifest.files) {
    const path = `${outDir}/${manifest.dir}/${f}`;
    if (!(await exists(path))) throw new CorruptCheckpointError(path, 'the manifest names it but the file is missing');
    shards.push(await Deno.readFile(path));
  }
  return { manifest, shards };
}
