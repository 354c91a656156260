/**
 * The shell commands a user guide gives, read out of its fenced `sh` / `bash` blocks and run as
 * written in a scratch copy of the project (tests/util/doc_rules.ts and tests/cli/doc_commands*.test.ts).
 */

/** One command line of a guide's shell block. */
export interface DocCommand {
  /** The guide, relative to the repository root (`README.md`, `docs/…`). */
  file: string;
  /** 1-based line number in the guide. */
  line: number;
  /** The command as written, without its trailing `# comment`. */
  command: string;
}

const SHELL_FENCE = /^```(sh|bash|shell|console)\s*$/;

/**
 * Every command line in the fenced shell blocks of `markdown` (blocks tagged sh, bash, shell or
 * console; untagged and other languages are not commands), with trailing comments removed and
 * blank or comment-only lines skipped.
 * @throws Error for an unterminated fence: the rest of the guide would silently stop counting.
 */
export function docCommands(file: string, markdown: string): DocCommand[] {
  const out: DocCommand[] = [];
  const lines = markdown.split('\n');
  let open: { shell: boolean; line: number } | null = null;
  lines.forEach((text, i) => {
    const fence = text.trim().startsWith('```');
    if (fence) {
      open = open ? null : { shell: SHELL_FENCE.test(text.trim()), line: i + 1 };
      return;
    }
    if (!open?.shell) return;
    const command = stripComment(text).trim();
    if (command) out.push({ file, line: i + 1, command });
  });
  if (open) throw new Error(`${file}:${(open as { line: number }).line}: a code fence that never closes`);
  return out;
}

/** `text` up to its first `#` that starts a shell comment (after whitespace, outside quotes). */
export function stripComment(text: string): string {
  let quote: string | null = null;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quote) {
      if (c === quote) quote = null;
    } else if (c === "'" || c === '"') {
      quote = c;
    } else if (c === '#' && (i === 0 || /\s/.test(text[i - 1]))) {
      return text.slice(0, i);
    }
  }
  return text;
}

/**
 * `command` with `flags` appended to the `npm run` of its `part`-th `&&`-separated part (the last
 * by default), after a `--` added when that part has none: a documented run made small without
 * changing what it names.
 * @throws Error when that part has no `npm run` to append to.
 */
export function withFlags(command: string, flags: readonly string[], part = -1): string {
  if (flags.length === 0) return command;
  const parts = command.split('&&');
  const i = part < 0 ? parts.length + part : part;
  const p = parts[i] ?? '';
  if (!/\bnpm run \S+/.test(p)) throw new Error(`cannot append flags to part ${i} of '${command}': no npm run there`);
  const sep = /\s--(\s|$)/.test(p) ? '' : ' --';
  const tail = p.endsWith(' ') ? ' ' : '';
  parts[i] = `${p.trimEnd()}${sep} ${flags.map(shellQuote).join(' ')}${tail}`;
  return parts.join('&&');
}

function shellQuote(s: string): string {
  return /^[\w@%+=:,./-]+$/.test(s) ? s : `'${s.replaceAll("'", `'\\''`)}'`;
}

const root = new URL('../../', import.meta.url).pathname;

/** The guides whose shell blocks are commands a user runs: README.md and docs/*.md, sorted, from the repository root. */
export async function guideFiles(): Promise<string[]> {
  const files = ['README.md'];
  for await (const e of Deno.readDir(`${root}docs`)) if (e.name.endsWith('.md')) files.push(`docs/${e.name}`);
  return files.sort();
}

/** Every command of the guides' shell blocks ({@link guideFiles}), each guide in document order. */
export async function documentedCommands(): Promise<DocCommand[]> {
  const out: DocCommand[] = [];
  for (const file of await guideFiles()) out.push(...docCommands(file, await Deno.readTextFile(`${root}${file}`)));
  return out;
}

/** What runs write into, which a scratch project must keep to itself. */
const OWN = new Set(['.git', 'runs', 'dist', 'test-results', 'playwright-report']);

/**
 * A scratch project: a temporary directory holding a copy of every top-level file of the
 * repository and a symlink to every folder but its outputs, so `npm run` runs the real scripts with their relative paths
 * (`runs/mine`, `my.txt`) landing in the scratch directory. The caller removes it.
 */
export async function scratchProject(): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: 'doc-commands-' });
  for await (const e of Deno.readDir(root)) {
    if (OWN.has(e.name)) continue;
    // Files are copied: Vite reads its config and HTML entries by their real path, which must lie
    // under the scratch root for `npm run build`; folders are linked.
    if (e.isFile) await Deno.copyFile(`${root}${e.name}`, `${dir}/${e.name}`);
    else await Deno.symlink(`${root}${e.name}`, `${dir}/${e.name}`);
  }
  return dir;
}

/**
 * `command` under bash in `cwd`, stdout and stderr interleaved, with the project's binaries on
 * PATH as `npm run` has them. setsid makes it and everything it starts (npm, Deno, worker ranks,
 * mpirun) one process group, so ending the group (`Deno.kill(-pid)`) leaves no orphans behind.
 */
function spawnGroup(command: string, cwd: string): Deno.ChildProcess {
  return new Deno.Command('setsid', {
    args: ['bash', '-c', `${command} 2>&1`],
    cwd,
    env: { XDG_RUNTIME_DIR: '/tmp', PATH: `${root}node_modules/.bin:${Deno.env.get('PATH') ?? ''}` },
    stdout: 'piped',
    stderr: 'inherit',
  }).spawn();
}

/** Exit code and output of one shell command. */
export interface ShellResult {
  code: number;
  output: string;
}

/**
 * Runs `command` with bash in `cwd` ({@link spawnGroup}).
 * @throws Error (a timeout) when it runs past `timeoutMs`: a documented command must end.
 */
export async function runShell(command: string, cwd: string, timeoutMs: number): Promise<ShellResult> {
  const child = spawnGroup(command, cwd);
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    try {
      Deno.kill(-child.pid, 'SIGKILL');
    } catch { /* already gone */ }
  }, timeoutMs);
  try {
    const out = await child.output();
    const output = new TextDecoder().decode(out.stdout);
    if (timedOut) throw new Error(`'${command}' ran past ${timeoutMs / 1000} s; its output:\n${output}`);
    return { code: out.code, output };
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Starts `command` (a server that runs until stopped) in `cwd`, fetches `url` until it answers
 * (at most `timeoutMs`), then ends the command's whole process group. A RegExp `url` is read
 * from what the command prints (its first group), for a server that names its own port.
 * @returns the page's status and body, the URL fetched, and what the command printed.
 * @throws Error when the command exits first or the URL never answers in time.
 */
export async function fetchWhileServing(
  command: string,
  cwd: string,
  url: string | RegExp,
  timeoutMs: number,
): Promise<{ status: number; body: string; url: string; output: string }> {
  const child = spawnGroup(command, cwd);
  let exited = false, printed = '';
  const done = (async () => {
    for await (const t of child.stdout.pipeThrough(new TextDecoderStream())) printed += t;
    await child.status;
    exited = true;
    return printed;
  })();
  const until = Date.now() + timeoutMs;
  let page: { status: number; body: string } | null = null, target = '';
  while (!exited && !page && Date.now() < until) {
    target = typeof url === 'string' ? url : url.exec(printed)?.[1] ?? '';
    try {
      if (!target) throw new Error('no URL printed yet');
      const r = await fetch(target);
      page = { status: r.status, body: await r.text() };
    } catch {
      await new Promise((r) => setTimeout(r, 500));
    }
  }
  try {
    Deno.kill(-child.pid, 'SIGTERM');
  } catch { /* already gone */ }
  const output = await done;
  if (!page) {
    throw new Error(
      `'${command}' ${exited ? 'exited' : 'did not answer'} before ${target || url} answered:\n${output}`,
    );
  }
  return { ...page, url: target, output };
}
