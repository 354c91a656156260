/**
 * workers/rank.worker.ts bundled to plain JS for Deno module workers: Deno type-checks a
 * TypeScript module worker per worker, which would cost seconds per rank.
 *
 * The bundle lives in a temp folder named `rank-worker-<pid>-<random>`, laid out like the
 * repository (`<dir>/a/b/rank.worker.js` beside a `<dir>/shaders` link, so the shader URLs
 * resolve). It is removed when the process exits normally or through exitProcess / Deno.exit (the `unload`
 * event: a finished run, an error, a second Ctrl-C); kill -9 fires nothing, so every call also
 * removes the folders of processes that are no longer alive, found by the pid in their name.
 */

const PREFIX = 'rank-worker-';
const NAME = /^rank-worker-(\d+)-/;

/** Whether process `pid` is alive (Linux: /proc; elsewhere assumed alive, so nothing is swept). */
function alive(pid: number): boolean {
  if (Deno.build.os !== 'linux') return true;
  try {
    Deno.statSync(`/proc/${pid}`);
    return true;
  } catch {
    return false;
  }
}

/**
 * Removes the bundle folders in `tmp` whose owner process has died (killed before it could
 * clean up). Returns the paths removed; folders of live processes and other names are left.
 */
export async function sweepStaleBundles(tmp: string): Promise<string[]> {
  const removed: string[] = [];
  try {
    for await (const e of Deno.readDir(tmp)) {
      const m = NAME.exec(e.name);
      if (!e.isDirectory || !m || alive(Number(m[1]))) continue;
      await Deno.remove(`${tmp}/${e.name}`, { recursive: true }).then(
        () => removed.push(`${tmp}/${e.name}`),
        () => {},
      );
    }
  } catch {
    // an unreadable temp folder: nothing to sweep
  }
  return removed;
}

/**
 * URL of the module worker `source` bundled to plain JS in a fresh temp folder (see the module
 * doc), after sweeping stale folders beside it. `links` are repository folders the worker
 * reads relative to its own URL (`shaders`, test data under `public`), linked beside the bundle.
 * Falls back to the TypeScript source (slower start) when bundling fails, and says so on stderr.
 */
export async function bundleWorker(source: URL, links: readonly string[] = ['shaders']): Promise<URL> {
  try {
    const dir = await Deno.makeTempDir({ prefix: `${PREFIX}${Deno.pid}-` });
    addEventListener('unload', () => {
      try {
        Deno.removeSync(dir, { recursive: true });
      } catch {
        // already gone
      }
    });
    await sweepStaleBundles(dir.slice(0, dir.lastIndexOf('/')));
    await Deno.mkdir(`${dir}/a/b`, { recursive: true });
    for (const d of links) await Deno.symlink(new URL(`../../${d}`, import.meta.url).pathname, `${dir}/${d}`);
    const out = `${dir}/a/b/${source.pathname.split('/').pop()!.replace(/\.ts$/, '.js')}`;
    const res = await new Deno.Command(Deno.execPath(), {
      args: ['bundle', '--quiet', source.pathname, '-o', out],
      stdout: 'null',
      stderr: 'piped',
    }).output();
    if (!res.success) throw new Error(new TextDecoder().decode(res.stderr));
    return new URL(`file://${out}`);
  } catch (e) {
    console.warn(
      `bundling ${source.pathname} failed, using the TypeScript worker (slower start): ${
        (e as Error).message.split('\n')[0]
      }`,
    );
    return source;
  }
}

/** The bundled workers/rank.worker.ts (see {@link bundleWorker}). */
export function rankWorkerUrl(): Promise<URL> {
  return bundleWorker(new URL('../../workers/rank.worker.ts', import.meta.url));
}
