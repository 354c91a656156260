/**
 * Atomic file writes (temp file in the same folder, synced, renamed over the target), the
 * clean-up of their temp files after an interrupted process, and the existence check they share.
 * Deno file system only: the browser never imports this layer.
 */

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

/** Whether `path` exists (file or folder). @throws the file-system error for anything but NotFound. */
export async function exists(path: string): Promise<boolean> {
  try {
    await Deno.stat(path);
    return true;
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) return false;
    throw e;
  }
}
