/**
 * A parallel run's checkpoints on disk: one folder per checkpoint, `ckpt-parallel-<step>/`,
 * holding every rank's file (`rank-<r>.safetensors`, src/parallel/run/rank_checkpoint.ts), and the
 * manifest `ckpt-parallel.json` naming the latest complete set. A set is written file by file
 * (each atomically) into its own folder, and only then does the manifest move to it (temp file +
 * rename), so a run killed at any point leaves the manifest naming the last complete set; the
 * folder of the previous set is removed after the switch unless the Pythia schedule keeps it.
 * The manifest records every rank file's SHA-256 and a digest of its own canonical content, so
 * a resumed run verifies the whole set — no file swapped, altered, truncated or out of step —
 * before any rank starts.
 */
import { z } from 'zod';
import { exists, writeAtomic } from './atomic.ts';
import {
  CorruptCheckpointError,
  type DecodeOptions,
  LegacyCheckpointError,
  upgradeLegacySafetensors,
} from '../util/safetensors.ts';
import { canonicalJson, SHA256_HEX, sha256Hex, zodIssues } from '../util/digest.ts';
import { decodeRankState } from '../parallel/run/rank_checkpoint.ts';
import { checkBatchOrder } from '../data/dataset.ts';
import { type ParallelPlan, planWorldSize } from '../parallel/plan/plan.ts';

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
  /** SHA-256 (hex) of each rank file's bytes, index = world rank (absent in legacy manifests). */
  fileSha256?: string[];
  plan: ParallelPlan;
  /** Whether the set is kept when a later one replaces it (Pythia schedule). */
  keep: boolean;
  /** SHA-256 (hex) of the canonical JSON of every other key (absent in legacy manifests). */
  sha256?: string;
}

const count = z.number().int().nonnegative();
const hex = z.string().regex(SHA256_HEX, 'expected 64 lowercase hex digits');
const ManifestSchema = z.strictObject({
  format: z.literal(MANIFEST_FORMAT),
  step: count,
  dir: z.string(),
  files: z.array(z.string()).min(1),
  fileSha256: z.array(hex).optional(),
  plan: z.looseObject({ dp: count.min(1), tp: count.min(1), pp: count.min(1), cp: count.min(1) }),
  keep: z.boolean(),
  sha256: hex.optional(),
});

/** Paths of a run directory's parallel checkpoints. */
export const parallelCheckpointFiles = (outDir: string) => ({
  manifest: `${outDir}/ckpt-parallel.json`,
  dirAt: (step: number) => `ckpt-parallel-${step}`,
});

/** The manifest's digest: SHA-256 of the canonical JSON of all its keys but `sha256`. */
const manifestDigest = ({ sha256: _, ...body }: Record<string, unknown>) =>
  sha256Hex(new TextEncoder().encode(canonicalJson(body)));

/**
 * Writes the world's rank files after `step` steps as a new set, then points the manifest
 * (carrying each file's SHA-256 and its own digest) at it and removes the previous set (unless
 * it was kept).
 * @throws (rejects with) file-system errors; the previous set stays named until the new one is complete.
 */
export async function saveCheckpointSet(
  outDir: string,
  step: number,
  shards: Uint8Array[],
  plan: ParallelPlan,
  keep: boolean,
): Promise<void> {
  const paths = parallelCheckpointFiles(outDir), dir = paths.dirAt(step);
  // None yet, or unreadable: nothing to remove. A legacy one is still the previous set to replace.
  const previous = await readManifest(outDir, { allowLegacy: true }).catch(() => null);
  await Deno.mkdir(`${outDir}/${dir}`, { recursive: true });
  const files = shards.map((_, r) => `rank-${r}.safetensors`);
  for (const [r, bytes] of shards.entries()) await writeAtomic(`${outDir}/${dir}/${files[r]}`, bytes);
  const fileSha256 = await Promise.all(shards.map((b) => sha256Hex(b)));
  const body = { format: MANIFEST_FORMAT, step, dir, files, fileSha256, plan, keep };
  const manifest: CheckpointManifest = { ...body, sha256: await manifestDigest(body) };
  await writeAtomic(paths.manifest, new TextEncoder().encode(JSON.stringify(manifest, null, 2) + '\n'));
  if (previous && previous.dir !== dir && !previous.keep) {
    await Deno.remove(`${outDir}/${previous.dir}`, { recursive: true }).catch(() => {});
  }
}

/**
 * The manifest of `outDir`, checked: its shape (zod), its digest, and that it names the set's
 * own folder `ckpt-parallel-<step>` and `rank-<r>.safetensors` for each of its plan's ranks. A
 * legacy manifest (no digests) is read only with `opts.allowLegacy`.
 * @throws Error when there is none ("no parallel checkpoint"), LegacyCheckpointError for a legacy
 *   manifest without `opts.allowLegacy`, CorruptCheckpointError when it is unreadable, malformed,
 *   inconsistent or does not match its digest.
 */
export async function readManifest(outDir: string, opts: DecodeOptions = {}): Promise<CheckpointManifest> {
  const path = parallelCheckpointFiles(outDir).manifest;
  if (!(await exists(path))) throw new Error(`--resume: no parallel checkpoint in ${outDir} (${path} is missing)`);
  let raw: Record<string, unknown>;
  try {
    raw = JSON.parse(await Deno.readTextFile(path));
  } catch (e) {
    throw new CorruptCheckpointError(path, `not JSON: ${(e as Error).message}`);
  }
  const parsed = ManifestSchema.safeParse(raw);
  if (!parsed.success) throw new CorruptCheckpointError(path, `manifest malformed: ${zodIssues(parsed.error)}`);
  // The raw plan keeps its key order, which plan comparisons by JSON text rely on.
  const m: CheckpointManifest = { ...parsed.data, plan: raw.plan as ParallelPlan };
  if (m.sha256 === undefined || m.fileSha256 === undefined) {
    if (m.sha256 !== undefined || m.fileSha256 !== undefined) {
      throw new CorruptCheckpointError(path, `has only one of 'sha256' and 'fileSha256'; a manifest carries both`);
    }
    if (!opts.allowLegacy) {
      throw new LegacyCheckpointError(
        path,
        `written before manifest digests: it has no 'sha256' nor 'fileSha256' (each rank file then needs its own legacy digest)`,
      );
    }
  } else if (m.sha256 !== (await manifestDigest(raw))) {
    throw new CorruptCheckpointError(
      path,
      `contents do not match its SHA-256 'sha256' (which covers every other key): the manifest was edited`,
    );
  }
  const want = parallelCheckpointFiles(outDir).dirAt(m.step), ranks = planWorldSize(m.plan);
  if (m.dir !== want) {
    throw new CorruptCheckpointError(path, `names folder '${m.dir}', a set taken at step ${m.step} is in '${want}'`);
  }
  if (m.files.length !== ranks) {
    throw new CorruptCheckpointError(path, `lists ${m.files.length} rank files, its plan has ${ranks} ranks`);
  }
  const bad = m.files.findIndex((f, r) => f !== `rank-${r}.safetensors`);
  if (bad >= 0) {
    throw new CorruptCheckpointError(path, `file ${bad} is '${m.files[bad]}', expected 'rank-${bad}.safetensors'`);
  }
  if (m.fileSha256 && m.fileSha256.length !== m.files.length) {
    throw new CorruptCheckpointError(path, `has ${m.fileSha256.length} file digests for ${m.files.length} files`);
  }
  return m;
}

/**
 * The latest complete set, verified: the manifest ({@link readManifest}); every rank file's bytes
 * hash to the SHA-256 the manifest records; every file passes its own digest and names the
 * manifest's step, plan and world size and its own rank. With `opts.allowLegacy`, legacy files
 * (data digest only, still verified) come back re-encoded in the current format, in memory only.
 * Nothing on disk is changed.
 * @throws the errors of {@link readManifest}, LegacyCheckpointError for a legacy rank file without
 *   `opts.allowLegacy`, CorruptCheckpointError naming a missing, altered, swapped or inconsistent rank file, and
 *   Error for a set written under another batch order that drew other rows (data/dataset.ts checkBatchOrder): the
 *   set is only loaded to be resumed, so it is refused here, before any worker starts.
 */
export async function loadCheckpointSet(
  outDir: string,
  opts: DecodeOptions = {},
): Promise<{ manifest: CheckpointManifest; shards: Uint8Array[] }> {
  const manifest = await readManifest(outDir, opts);
  const mpath = parallelCheckpointFiles(outDir).manifest;
  const shards: Uint8Array[] = [];
  for (const [r, f] of manifest.files.entries()) {
    const path = `${outDir}/${manifest.dir}/${f}`;
    if (!(await exists(path))) throw new CorruptCheckpointError(path, 'the manifest names it but the file is missing');
    let bytes = await Deno.readFile(path);
    const recorded = manifest.fileSha256?.[r];
    if (recorded !== undefined) {
      const got = await sha256Hex(bytes);
      if (got !== recorded) {
        throw new CorruptCheckpointError(
          path,
          `its SHA-256 ${got} is not the ${recorded} that ${mpath} records for rank ${r} (altered, truncated or swapped file)`,
        );
      }
    }
    const { meta, legacy } = await decodeRankState(bytes, path, opts);
    const expect = `step ${manifest.step}, rank ${r} of ${manifest.files.length}, plan ${canonicalJson(manifest.plan)}`;
    const got = `step ${meta.step}, rank ${meta.rank} of ${meta.worldSize}, plan ${canonicalJson(meta.plan)}`;
    if (got !== expect) throw new CorruptCheckpointError(path, `holds ${got}; the manifest ${mpath} expects ${expect}`);
    checkBatchOrder(meta.batchOrder, manifest.plan.microBatches ?? 1, path);
    if (legacy) bytes = await upgradeLegacySafetensors(bytes, path) as Uint8Array<ArrayBuffer>;
    shards.push(bytes);
  }
  return { manifest, shards };
}
