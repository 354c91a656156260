/** `mpirun -n N deno run -A src/cli/train.ts …` on the test backend, from the repository root, with a time limit. */
import { withTestBackend } from './cli.ts';

const root = new URL('../../', import.meta.url).pathname;

/** Runs the training CLI under mpirun; resolves to its exit code and output. */
export async function mpirun(
  n: number,
  args: string[],
  timeoutMs = 240_000,
): Promise<{ code: number; stdout: string; stderr: string }> {
  const out = await new Deno.Command('mpirun', {
    args: ['-n', String(n), Deno.execPath(), 'run', '-A', 'src/cli/train.ts', ...withTestBackend('train.ts', args)],
    cwd: root,
    env: { XDG_RUNTIME_DIR: '/tmp' },
    stdout: 'piped',
    stderr: 'piped',
    signal: AbortSignal.timeout(timeoutMs),
  }).output();
  return { code: out.code, stdout: new TextDecoder().decode(out.stdout), stderr: new TextDecoder().decode(out.stderr) };
}
