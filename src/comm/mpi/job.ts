/**
 * The life of this process in its mpirun job (docs/design.md#launch-and-ending-the-job): joining it (MPI_Init_thread),
 * leaving it (MPI_Finalize), and ending the whole job from a rank that fails, at any point.
 *
 * Why the care: MPICH's launcher (Hydra) ends a job when one of its processes dies by a signal,
 * calls MPI_Abort, or exits after joining without leaving; it keeps waiting when a process merely
 * exits non-zero before MPI_Init — its peers then wait in MPI_Init for ever. And a process reaches
 * Hydra through the PMI descriptor mpirun hands it (PMI_FD) unless mpirun was given `-pmi-port`
 * (PMI over a TCP port named in PMI_PORT): Node — so `npm run` — does not pass inherited
 * descriptors on to its children, so under `mpirun -n N npm run …` the rank finds PMI_FD closed,
 * or another of its own files under that number, and MPI_Init fails or waits on the wrong file.
 * Deno-only.
 */
import { check, MPI, mpi } from './libmpi.ts';
import { watchInit } from './init_watch.ts';

/** Test-only fault injection: `<rank>:<point>:<kill|throw|exit>` makes that rank die by SIGKILL, throw, or exit 3 at `point`. */
export const MPI_FAULT_ENV = 'WEBGPU_SANDBOX_MPI_FAULT';

/** Where {@link MPI_FAULT_ENV} can strike: just before MPI_Init, or as a rank's first training steps begin. */
export type FaultPoint = 'init' | 'steps';

/** How long a failing rank waits, after printing why, before it ends the job (see {@link abortJob}). */
const ABORT_GRACE_MS = 300;

/** O_CLOEXEC in /proc/self/fdinfo's octal `flags` (Linux). */
const O_CLOEXEC = 0o2000000;

let state: 'out' | 'in' | 'left' = 'out';
/** MPI_Init_thread's out-parameter: the thread level MPI granted. */
const provided = new Int32Array(1);

/**
 * The rank mpirun gave this process, from the launcher's environment (before MPI_Init): PMI_RANK
 * (Hydra's PMI_FD mode), PMI_ID (its -pmi-port mode), or Open MPI's; undefined when none is set.
 */
export function launchRank(env: (k: string) => string | undefined = (k) => Deno.env.get(k)): number | undefined {
  const v = env('PMI_RANK') ?? env('PMI_ID') ?? env('OMPI_COMM_WORLD_RANK');
  return v === undefined ? undefined : Number(v);
}

/**
 * Why this process cannot reach mpirun's PMI server through the descriptor it was given, or ''
 * when it can (or was given a port, or no descriptor). The descriptor must be open, a socket, and
 * inherited — not close-on-exec, which every descriptor Deno opens itself is, so one that reuses
 * the number is told apart. Linux: read from /proc/self; elsewhere '' (nothing to read it from).
 * @param how the command to start the job with instead.
 */
export function pmiProblem(how: string, env: (k: string) => string | undefined = (k) => Deno.env.get(k)): string {
  const fd = env('PMI_FD');
  if (fd === undefined || env('PMI_PORT') !== undefined) return '';
  let why = '';
  try {
    if (!Deno.statSync('/proc/self/fdinfo').isDirectory) return '';
  } catch {
    return ''; // no /proc: not Linux, the check cannot be made
  }
  try {
    const flags = /^flags:\s*([0-7]+)$/m.exec(Deno.readTextFileSync(`/proc/self/fdinfo/${fd}`))?.[1];
    if (flags !== undefined && (parseInt(flags, 8) & O_CLOEXEC)) why = 'is another file here';
    else if (!Deno.statSync(`/proc/self/fd/${fd}`).isSocket) why = 'is not a socket here';
  } catch {
    why = 'is closed here';
  }
  if (!why) return '';
  return `mpirun gave this process its PMI connection as descriptor PMI_FD=${fd}, which ${why}: a process ` +
    `between mpirun and this one did not pass it on (npm runs scripts through Node, which closes it); start the ` +
    `job with PMI over a TCP port instead: ${how}`;
}

/**
 * Strikes the fault {@link MPI_FAULT_ENV} names for this rank at `point`, if any (tests only).
 * @throws Error "fault injected …" for `throw`.
 */
export function injectFault(point: FaultPoint, rank: number | undefined): void {
  const spec = Deno.env.get(MPI_FAULT_ENV);
  if (!spec) return;
  const [r, p, how] = spec.split(':');
  if (Number(r) !== rank || p !== point) return;
  if (how === 'throw') throw new Error(`fault injected at ${point} on rank ${rank} (${MPI_FAULT_ENV})`);
  if (how === 'exit') Deno.exit(3); // quietly, as a crash that exits would
  // The time of death, for the test that bounds how long the job outlives it.
  console.error(`fault: rank ${rank} dies by SIGKILL at ${point}, t=${Date.now()}`);
  Deno.kill(Deno.pid, 'SIGKILL');
}

/**
 * MPI_Init_thread(MPI_THREAD_MULTIPLE), after checking that PMI is reachable.
 * @param how the command to show when it is not.
 * @throws Error when PMI_FD did not reach this process ({@link pmiProblem}), when MPI is already
 *   initialised here, or when MPI grants less than MPI_THREAD_MULTIPLE.
 */
export async function joinJob(how: string): Promise<void> {
  const problem = pmiProblem(how);
  if (problem) throw new Error(problem);
  if (state !== 'out') throw new Error('mpiWorld: MPI is already initialised in this process (one world per process)');
  injectFault('init', launchRank());
  state = 'in';
  // MPICH's default error handler aborts the job itself (through PMI) when this fails.
  check(await initThread(), 'MPI_Init_thread');
  if (provided[0] < MPI.THREAD_MULTIPLE) {
    throw new Error(`MPI granted thread level ${provided[0]}, the MPI transport needs MPI_THREAD_MULTIPLE (3)`);
  }
}

/** MPI_Init_thread on a helper thread, watching this node's ranks meanwhile (init_watch.ts); resolves to its code. */
async function initThread(): Promise<number> {
  const unwatch = watchInit(launchRank());
  try {
    provided[0] = 0;
    return await mpi().MPI_Init_thread(null, null, MPI.THREAD_MULTIPLE, provided);
  } finally {
    unwatch();
  }
}

/** MPI_Finalize (collective: every rank calls it after its last MPI call). */
export async function leaveJob(): Promise<void> {
  state = 'left';
  check(await mpi().MPI_Finalize(), 'MPI_Finalize');
}

/**
 * Ends the whole job because this rank failed with `message`: prints `error: rank R: message`,
 * waits {@link ABORT_GRACE_MS} (mpirun forwards a rank's stderr through a proxy that MPI_Abort
 * tears down; the line was seen lost under load without it), then MPI_Abort. A rank that has not
 * joined yet joins first (MPI_Init waits for its peers, which are on their way there), since
 * before MPI_Init a non-zero exit would leave its peers waiting; one whose PMI connection never
 * arrived cannot join, and ends by SIGKILL, which Hydra also ends the job on. After MPI_Finalize
 * every rank is past its last collective: it exits 1.
 */
export async function abortJob(message: string): Promise<never> {
  const rank = launchRank();
  console.error(`error: rank ${rank ?? '?'}: ${message.split('\n').join(' ')}`);
  await new Promise((r) => setTimeout(r, ABORT_GRACE_MS));
  if (state === 'out') {
    if (pmiProblem('')) Deno.kill(Deno.pid, 'SIGKILL');
    state = 'in';
    await initThread();
  }
  if (state === 'in') mpi().MPI_Abort(MPI.COMM_WORLD, 1);
  Deno.exit(1);
}
