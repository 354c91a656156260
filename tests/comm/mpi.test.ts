/**
 * The MPI transport (docs/design.md#mpi-one-rank-per-process-two-backends-per-collective) with real processes: `mpirun
 * -n N` ranks of tests/comm/mpi_rank.ts, each one MPI process. Every collective × algorithm × op × dtype × in/out of
 * place of this project's algorithms over the MPI wire, the same matrix through MPI's own collectives (backend `mpi`),
 * and both at once on concurrent groups — bit-exact against the CPU reference on every rank; the same on process groups
 * made by MPI_Comm_split (tests/comm/mpi_split.ts). Plus the refusals: a rank started without mpirun, backend `mpi`
 * over MessagePorts, and MPICH missing; and the comm bench's tuning table from both backends. Needs Debian's mpich
 * (scripts/setup.sh installs it).
 */
import { deepStrictEqual, equal, match, ok, rejects, throws } from 'node:assert/strict';
import { closeLocalWorld, localWorld, onEveryRank } from '../../src/comm/local.ts';
import { mpi } from '../../src/comm/mpi/libmpi.ts';
import type { Report } from '../../src/comm/scenarios.ts';
import { parseTuning } from '../../src/comm/tuning.ts';

const root = new URL('../../', import.meta.url).pathname;
const RANK = 'tests/comm/mpi_rank.ts';

/** Runs `mpirun -n n deno run -A mpi_rank.ts task` and returns each rank's report, by rank. */
async function job(n: number, task: string): Promise<Report[]> {
  const out = await new Deno.Command('mpirun', {
    args: ['-n', String(n), Deno.execPath(), 'run', '-A', RANK, task],
    cwd: root,
    stdout: 'piped',
    stderr: 'piped',
    signal: AbortSignal.timeout(180_000),
  }).output();
  const stdout = new TextDecoder().decode(out.stdout), stderr = new TextDecoder().decode(out.stderr);
  equal(out.code, 0, `mpirun -n ${n} ${task} failed:\n${stderr}\n${stdout}`);
  const lines = stdout.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l));
  deepStrictEqual(lines.map((l) => l.rank).sort(), [...Array(n).keys()], `one report per rank:\n${stdout}`);
  ok(lines.every((l) => l.size === n), 'every rank sees the world size from MPI');
  return lines.sort((a, b) => a.rank - b.rank).map((l) => l.report);
}

for (
  const [n, task, least] of [[1, 'matrix', 500], [2, 'matrix', 500], [3, 'matrix', 500], [4, 'native', 150]] as const
) {
  Deno.test(`MPI transport, ${n} process(es): ${task === 'native' ? "MPI's own collectives" : "this project's algorithms"} are bit-exact on every rank`, async () => {
    const reps = await job(n, task);
    deepStrictEqual(reps.flatMap((r) => r.failures), []);
    for (const r of reps) ok(r.cases >= least, `only ${r.cases} cases ran`);
  });
}

Deno.test('MPI transport, 4 processes: MPI collectives and ours interleave on two groups at once', async () => {
  const reps = await job(4, 'groups');
  deepStrictEqual(reps.flatMap((r) => r.failures), []);
  for (const r of reps) ok(r.cases > 650, `only ${r.cases} cases ran`);
});

for (const n of [2, 4]) {
  Deno.test(`MPI transport, ${n} processes: groups split with MPI_Comm_split agree with MPI and are bit-exact with both backends`, async () => {
    const reps = await job(n, 'split');
    deepStrictEqual(reps.flatMap((r) => r.failures), []);
    // Per rank: 3 or 4 groups, each MPI's matrix (~150 cases) and ours (~500), plus the checks.
    for (const r of reps) ok(r.cases > 3 * 600, `only ${r.cases} cases ran`);
  });
}

Deno.test('a rank started without mpirun is refused, naming the launch command', async () => {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ['run', '-A', RANK, 'matrix'],
    cwd: root,
    stdout: 'piped',
    stderr: 'piped',
    env: { HOME: Deno.env.get('HOME') ?? '/tmp', NO_COLOR: '1' }, // no PMI_* / OMPI_* variables
    clearEnv: true,
  }).output();
  ok(out.code !== 0);
  match(
    new TextDecoder().decode(out.stderr),
    /the MPI transport runs one rank per process under an MPI launcher; start it as: mpirun -n N/,
  );
});

Deno.test('backend mpi over MessagePorts is refused with the transport that has it', async () => {
  const world = localWorld(2);
  try {
    await rejects(
      onEveryRank(world, (c) => c.allReduce(new Float32Array(4), { backend: 'mpi' })),
      /backend 'mpi' runs MPI's own collectives and needs the MPI transport \(--transport mpi under mpirun\)/,
    );
  } finally {
    closeLocalWorld(world);
  }
});

Deno.test('a machine without MPICH gets the package to install', () => {
  throws(() => mpi(['libmpich-missing.so.99']), /MPI is not installed: .*apt-get install mpich libmpich-dev/);
});

Deno.test('bench comm --transport mpi --tune: every candidate timed, the table keeps the fastest', async () => {
  const dir = await Deno.makeTempDir();
  const out = await new Deno.Command('mpirun', {
    args: ['-n', '2', Deno.execPath(), 'run', '-A', 'src/cli/bench.ts', 'comm', '--transport', 'mpi']
      .concat([
        '--max-bytes',
        '1KiB',
        '--step',
        '16',
        '--quick',
        '--ops',
        'allReduce,allGather',
        '--tune',
        `${dir}/t.json`,
      ]),
    cwd: root,
    stdout: 'piped',
    stderr: 'piped',
    signal: AbortSignal.timeout(120_000),
  }).output();
  const stdout = new TextDecoder().decode(out.stdout);
  equal(out.code, 0, new TextDecoder().decode(out.stderr));
  match(stdout, /MPI group size 2/);
  equal(stdout.match(/MPI group size 2/g)!.length, 1, 'rank 0 alone prints');
  const t = parseTuning(await Deno.readTextFile(`${dir}/t.json`), 't.json');
  // S = 4, 64, 1024 B for each collective; allReduce has 5 algorithms, allGather 3, each plus MPI's own.
  equal(t.entries.length, 6);
  for (const e of t.entries) {
    equal(Object.keys(e.ms).length, (e.coll === 'allReduce' ? 5 : 3) + 1, JSON.stringify(e));
    const best = Math.min(...Object.values(e.ms));
    equal(e.ms[e.backend === 'mpi' ? 'mpi' : `ours/${e.algorithm}`], best, JSON.stringify(e));
  }
});
