/**
 * MPI jobs of the training CLI as docs/mpi-and-collectives.md gives them — `mpirun -pmi-port -n N npm run train -- …`
 * — on the test backend, from the repository root, with a time limit.
 */
import { deepStrictEqual, equal, ok } from 'node:assert/strict';
import { withTestBackend } from './cli.ts';

const root = new URL('../../', import.meta.url).pathname;

/** npm's update check would reach for the network from every rank. */
const ENV = { XDG_RUNTIME_DIR: '/tmp', npm_config_update_notifier: 'false' };

/** mpirun's arguments for `n` ranks of `npm run <script> -- args` (the guide's form; `pmi` false drops -pmi-port). */
export function mpirunArgs(n: number, script: 'train' | 'bench', args: string[], pmi = true): string[] {
  const cli = script === 'train' ? withTestBackend('train.ts', args) : args;
  return [...(pmi ? ['-pmi-port'] : []), '-n', String(n), 'npm', 'run', script, '--', ...cli];
}

/** Runs `mpirun` with `args` from the repository root; resolves to its exit code and output. */
export async function mpirunRaw(
  args: string[],
  timeoutMs = 240_000,
  env: Record<string, string> = {},
): Promise<{ code: number; stdout: string; stderr: string }> {
  const out = await new Deno.Command('mpirun', {
    args,
    cwd: root,
    env: { ...ENV, ...env },
    stdout: 'piped',
    stderr: 'piped',
    signal: AbortSignal.timeout(timeoutMs),
  }).output();
  return { code: out.code, stdout: new TextDecoder().decode(out.stdout), stderr: new TextDecoder().decode(out.stderr) };
}

/** Runs the training CLI under mpirun as the MPI guide does; resolves to its exit code and output. */
export function mpirun(
  n: number,
  args: string[],
  timeoutMs = 240_000,
  env: Record<string, string> = {},
): Promise<{ code: number; stdout: string; stderr: string }> {
  return mpirunRaw(mpirunArgs(n, 'train', args), timeoutMs, env);
}

/** Starts the training CLI under mpirun as the MPI guide does, without waiting (for kill tests). */
export function spawnMpirun(n: number, args: string[]): Deno.ChildProcess {
  return new Deno.Command('mpirun', {
    args: mpirunArgs(n, 'train', args),
    cwd: root,
    env: ENV,
    stdout: 'null',
    stderr: 'null',
  }).spawn();
}

/**
 * Each of the `n` ranks ran in an MPI process of its own: trace.json's `processes` lists n
 * distinct pids (none this test's) with ranks 0..n-1, each having recorded its rank's spans.
 */
export async function checkProcesses(trace: string, n: number): Promise<void> {
  const procs: { rank: number; pid: number; spans: number }[] =
    JSON.parse(await Deno.readTextFile(trace)).otherData.processes;
  deepStrictEqual(procs.map((p) => p.rank), [...Array(n).keys()], JSON.stringify(procs));
  equal(new Set(procs.map((p) => p.pid)).size, n, `one process per rank: ${JSON.stringify(procs)}`);
  ok(procs.every((p) => p.pid !== Deno.pid && p.spans > 0), JSON.stringify(procs));
}
