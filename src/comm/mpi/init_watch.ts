/**
 * Watching this node's other ranks while MPI_Init waits for them (docs/design.md#launch-and-ending-the-job). Hydra's
 * proxy ends the job for sure when a process that has opened its PMI connection dies (the
 * connection closes); for one that dies before, it has only the process's exit to go by, and
 * seen on this machine about once in fifteen tries under load, it missed a rank killed just
 * before MPI_Init: its peers then waited in MPI_Init for ever. So while MPI_Init runs, each rank
 * counts the live processes its proxy launched (the proxy's children: a dead one is a zombie
 * the proxy has not reaped, or gone); when fewer than MPI_LOCALNRANKS are left, one of them
 * ended before joining, and this rank, whose PMI connection is open, ends itself — which the
 * proxy does see, and on which it ends the job. Linux (/proc); ranks on other nodes are watched
 * by their own node's ranks.
 */

/** Fields of /proc/<pid>/stat past the command name (which may hold spaces and parentheses). */
function stat(pid: number): { state: string; ppid: number; comm: string } | undefined {
  try {
    const s = Deno.readTextFileSync(`/proc/${pid}/stat`);
    const close = s.lastIndexOf(')');
    const [state, ppid] = s.slice(close + 2).split(' ');
    return { state, ppid: Number(ppid), comm: s.slice(s.indexOf('(') + 1, close) };
  } catch {
    return undefined; // gone
  }
}

/** The hydra_pmi_proxy this process descends from (through npm and a shell, say), or undefined. */
export function proxyPid(): number | undefined {
  let pid = Deno.pid;
  for (let depth = 0; depth < 8; depth++) {
    const up = stat(pid)?.ppid;
    if (!up || up <= 1) return undefined;
    if (stat(up)?.comm === 'hydra_pmi_proxy') return up;
    pid = up;
  }
  return undefined;
}

/** How many of `proxy`'s children are alive (not zombies). */
export function liveChildren(proxy: number): number {
  let n = 0;
  for (const e of Deno.readDirSync('/proc')) {
    if (!/^\d+$/.test(e.name)) continue;
    const s = stat(Number(e.name));
    if (s?.ppid === proxy && s.state !== 'Z') n++;
  }
  return n;
}

/**
 * Starts watching this node's ranks (see the module doc): every `everyMs`, when fewer than
 * MPI_LOCALNRANKS of the proxy's children are alive, prints which and ends this process with
 * SIGKILL. Returns the function that stops the watch; a no-op one when there is nothing to
 * watch (no /proc, no Hydra proxy above this process, or no MPI_LOCALNRANKS).
 * @param rank this process's rank, for the message.
 */
export function watchInit(rank: number | undefined, everyMs = 500): () => void {
  const local = Number(Deno.env.get('MPI_LOCALNRANKS'));
  let proxy: number | undefined;
  try {
    proxy = Number.isInteger(local) && local > 0 ? proxyPid() : undefined;
  } catch {
    proxy = undefined; // no /proc: nothing to watch with
  }
  if (proxy === undefined) return () => {};
  const timer = setInterval(() => {
    const live = liveChildren(proxy);
    if (live >= local) return;
    console.error(
      `error: rank ${rank ?? '?'}: ${local - live} of the ${local} processes mpirun started on this node ended ` +
        'before MPI_Init; ending the job',
    );
    Deno.kill(Deno.pid, 'SIGKILL');
  }, everyMs);
  return () => clearInterval(timer);
}
