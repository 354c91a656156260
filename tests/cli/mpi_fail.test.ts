/**
 * No mpirun job outlives a failed rank (docs/design.md#launch-and-ending-the-job, comm/mpi/job.ts). `mpirun -n 4 npm
 * run train …` without -pmi-port (npm's Node drops the PMI descriptor) stops on every rank with
 * the command to use, instead of failing in MPI_Init and leaving a rank waiting for ever. A rank
 * killed (SIGKILL) just before MPI_Init — while its peers wait there — or as its first steps
 * begin — while its peers wait in a step's collectives — ends the job within 10 s, non-zero, no
 * process left; a rank that throws before MPI_Init ends it with its message, and one that exits
 * quietly before it is seen gone by its peer waiting in MPI_Init. The faults come from
 * WEBGPU_SANDBOX_MPI_FAULT, through the MPI guide's launch (tests/util/mpirun.ts).
 */
import { deepStrictEqual, match, ok } from 'node:assert/strict';
import { TINY_RUN } from '../util/cli.ts';
import { mpirun, mpirunArgs, mpirunRaw } from '../util/mpirun.ts';
import { MPI_FAULT_ENV } from '../../src/comm/mpi/job.ts';

const TINY = [...TINY_RUN, '--steps', '50', '--eval-batches', '1'];
const opts = { sanitizeResources: false, sanitizeOps: false };
/** A hung job is cut here, well past the 10 s the assertions allow. */
const CUT_MS = 60_000;

/** Pids of the `deno` processes whose command line names `marker` (the MPI ranks of one job). */
async function ranksOf(marker: string): Promise<number[]> {
  const out = await new Deno.Command('ps', { args: ['-eo', 'pid=,comm=,args='], stdout: 'piped' }).output();
  return new TextDecoder().decode(out.stdout).split('\n').map((l) => l.trim().split(/\s+/))
    .filter((f) => f[1] === 'deno' && f.slice(2).join(' ').includes(marker)).map((f) => Number(f[0]));
}

/**
 * The rank processes of `marker` still alive `graceMs` after the job ended: a rank that Hydra
 * killed can take a moment to be reaped on a loaded machine; one alive after that is an orphan.
 */
async function ranksLeft(marker: string, graceMs = 5000): Promise<number[]> {
  const until = Date.now() + graceMs;
  let left = await ranksOf(marker);
  while (left.length > 0 && Date.now() < until) {
    await new Promise((r) => setTimeout(r, 100));
    left = await ranksOf(marker);
  }
  return left;
}

Deno.test({
  name: 'mpirun -n 4 npm run train without -pmi-port stops every rank with the command to use, never hangs',
  ...opts,
  fn: async () => {
    const dir = await Deno.makeTempDir();
    const args = [...TINY, '--dp', '2', '--tp', '2', '--transport', 'mpi', '--out', dir];
    const res = await mpirunRaw(mpirunArgs(4, 'train', args, false), CUT_MS);
    ok(res.code !== 0 && res.code !== 143, `exit status ${res.code}: non-zero, and not the cut`);
    match(res.stderr, /PMI_FD=\d+, which is (closed|another file|not a socket) here/);
    match(res.stderr, /start the job with PMI over a TCP port instead: mpirun -pmi-port -n 4 npm run train -- /);
    deepStrictEqual(await ranksLeft(dir), [], 'no rank is left running');
  },
});

for (
  const [n, fault, plan] of [
    [2, '1:init:kill', ['--dp', '2']],
    [4, '2:init:kill', ['--dp', '2', '--tp', '2']],
    [2, '1:steps:kill', ['--dp', '2']],
  ] as const
) {
  Deno.test({
    name: `mpirun -n ${n}: a rank killed at ${fault.split(':')[1]} ends the job within 10 s, non-zero`,
    ...opts,
    fn: async () => {
      const dir = await Deno.makeTempDir();
      const res = await mpirun(n, [...TINY, ...plan, '--transport', 'mpi', '--out', dir], CUT_MS, {
        [MPI_FAULT_ENV]: fault,
      });
      const ended = Date.now();
      const died = Number(/fault: rank \d+ dies by SIGKILL at \w+, t=(\d+)/.exec(res.stderr)?.[1]);
      ok(died > 0, `the rank died as asked:\n${res.stderr}`);
      ok(ended - died <= 10_000, `mpirun ended ${ended - died} ms after the rank died`);
      ok(res.code !== 0, `exit status ${res.code} is non-zero`);
      deepStrictEqual(await ranksLeft(dir), [], 'no rank is left running');
    },
  });
}

Deno.test({
  name: 'mpirun -n 2: a rank failing before MPI_Init ends the job, non-zero, with its message',
  ...opts,
  fn: async () => {
    const dir = await Deno.makeTempDir();
    const res = await mpirun(2, [...TINY, '--dp', '2', '--transport', 'mpi', '--out', dir], CUT_MS, {
      [MPI_FAULT_ENV]: '1:init:throw',
    });
    ok(res.code !== 0 && res.code !== 143, `exit status ${res.code}: non-zero, and not the cut`);
    match(res.stderr, /error: rank 1: fault injected at init on rank 1/);
    match(res.stderr, /MPI_Abort/);
    deepStrictEqual(await ranksLeft(dir), [], 'no rank is left running');
  },
});

Deno.test({
  name: 'mpirun -n 2: a rank that exits before MPI_Init ends the job: the rank waiting in MPI_Init sees it gone',
  ...opts,
  fn: async () => {
    const dir = await Deno.makeTempDir();
    // Hydra waits on a process that exits non-zero before joining; its peer in MPI_Init must not.
    const res = await mpirun(2, [...TINY, '--dp', '2', '--transport', 'mpi', '--out', dir], CUT_MS, {
      [MPI_FAULT_ENV]: '1:init:exit',
    });
    ok(res.code !== 0 && res.code !== 143, `exit status ${res.code}: non-zero, and not the cut`);
    match(res.stderr, /error: rank 0: 1 of the 2 processes mpirun started on this node ended before MPI_Init/);
    deepStrictEqual(await ranksLeft(dir), [], 'no rank is left running');
  },
});
