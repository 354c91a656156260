/** A run directory on disk (DESIGN.md §8): metrics.jsonl, config.json, ckpt.safetensors. */

/** Writes bytes atomically: a temp file in the same folder, synced, then renamed over the target. */
export async function writeAtomic(path: string, bytes: Uint8Array): Promise<void> {
  const tmp = `${path}.${crypto.randomUUID().slice(0, 8)}.tmp`;
  const f = await Deno.open(tmp, { write: true, create: true, truncate: true });
  try {
    let off = 0;
    while (off < bytes.length) off += await f.write(bytes.subarray(off));
    await f.syncData();
  } finally {
    f.close();
  }
  await Deno.rename(tmp, path);
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
