/** Starts a CLI and acts on it mid-run: wait for a line of its output, then signal it. */
import { withTestBackend } from './cli.ts';

const root = new URL('../../', import.meta.url).pathname;

export interface Running {
  child: Deno.ChildProcess;
  /** Resolves once stdout or stderr has a line matching `re` (rejects when the process ends first). */
  waitFor(re: RegExp): Promise<void>;
  /** What it has printed so far. */
  output(): { stdout: string; stderr: string };
  /** Waits for the exit; resolves to the status and everything the process printed. */
  done(): Promise<{ code: number; signal: Deno.Signal | null; stdout: string; stderr: string }>;
}

/** `deno run -A src/cli/<script> ...args` from the project root, stdout and stderr collected as they come. */
export function spawnUntil(
  script: string,
  args: string[],
  env: Record<string, string> = {},
): Running {
  const child = new Deno.Command(Deno.execPath(), {
    args: ['run', '-A', `src/cli/${script}`, ...withTestBackend(script, args)],
    cwd: root,
    env: { XDG_RUNTIME_DIR: '/tmp', ...env },
    stdout: 'piped',
    stderr: 'piped',
  }).spawn();
  let stdout = '', stderr = '', ended = false;
  const waiters: { re: RegExp; resolve: () => void; reject: (e: Error) => void }[] = [];
  const check = () => {
    for (const w of waiters.splice(0)) {
      if (w.re.test(stdout) || w.re.test(stderr)) w.resolve();
      else if (ended) {
        w.reject(new Error(`the process ended before printing ${w.re}:\n${stdout}\n${stderr}`));
      } else waiters.push(w);
    }
  };
  const pump = async (s: ReadableStream<Uint8Array>, add: (t: string) => void) => {
    for await (const t of s.pipeThrough(new TextDecoderStream())) {
      add(t);
      check();
    }
  };
  const pumps = Promise.all([
    pump(child.stdout, (t) => (stdout += t)),
    pump(child.stderr, (t) => (stderr += t)),
  ]);
  const status = child.status.then(async (s) => {
    await pumps;
    ended = true;
    check();
    return s;
  });
  return {
    child,
    waitFor: (re) =>
      new Promise<void>((resolve, reject) => {
        waiters.push({ re, resolve, reject });
        check();
      }),
    output: () => ({ stdout, stderr }),
    done: async () => {
      const s = await status;
      return { code: s.code, signal: s.signal, stdout, stderr };
    },
  };
}
