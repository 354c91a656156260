/**
 * The comm suite's MPI reference (docs/design.md#mpi-one-rank-per-process-two-backends-per-collective and
 * docs/design.md#the-shared-data-plane-of-worker-ranks): MPICH's own collective at the sizes and world sizes of the
 * worker run, `mpirun -n p` per world size, called three ways and timed by the same loop (comm/timing.ts):
 * - `c-loop`: a C loop (mpi_loop.c, built with mpicc into a temporary directory at bench time):
 *   what MPICH itself costs;
 * - `ffi-sync`: a loop of synchronous Deno FFI calls (mpi_sync_loop.ts): MPICH as seen from
 *   this runtime, with nothing between the calls;
 * - `helper-thread`: this project's `mpi` backend (`bench comm --transport mpi --native-only`),
 *   each call on a Deno FFI helper thread as a training run makes it.
 * Deno-only.
 */
import type { SizedCollective } from '../comm/cost.ts';
import { bandwidths } from '../comm/cost.ts';
import type { TimingBudget } from '../comm/timing.ts';
import { type CommBenchOptions, type CommBenchRow, type MpiSource, sweepSizes } from './comm.ts';
import { MPI_CALLS, mpiTable, SOURCE_LABELS } from './comm_planes.ts';

const dec = new TextDecoder();

/** Whether `cmd --version` runs here: '' when it does, else why not. */
async function missing(cmd: string, install: string): Promise<string> {
  try {
    const out = await new Deno.Command(cmd, { args: ['--version'], stdout: 'null', stderr: 'null' }).output();
    return out.success ? '' : `${cmd} --version failed`;
  } catch {
    return `${cmd} is not installed (Debian: apt-get install ${install})`;
  }
}

/** Runs `cmd args`; resolves to its stdout. @throws Error with its output when it fails. */
async function run(cmd: string, args: string[], what: string): Promise<string> {
  const res = await new Deno.Command(cmd, { args, stdout: 'piped', stderr: 'piped' }).output();
  if (!res.success) throw new Error(`${what} failed:\n${dec.decode(res.stderr)}${dec.decode(res.stdout)}`);
  return dec.decode(res.stdout);
}

/** The loop's arguments (mpi_loop.c): W WMS K MS MAX, then collective:bytes per case. */
function loopArgs(b: TimingBudget, cases: { coll: SizedCollective; bytes: number }[]): string[] {
  return [b.warmup, b.warmupMs, b.minIters, b.minMs, b.maxIters].map(String)
    .concat(cases.map((c) => `${c.coll}:${c.bytes}`));
}

/** Rows from the JSON lines rank 0 of a reference loop printed. */
function parseLines(stdout: string, p: number, source: MpiSource): CommBenchRow[] {
  return stdout.split('\n').filter((l) => l.startsWith('{')).map((l) => {
    const r = JSON.parse(l);
    return { ...r, algorithm: 'mpi', p, source, ...bandwidths(r.coll, r.bytes, r.median, p) };
  });
}

/** Builds mpi_loop.c into `dir`; resolves to the binary's path. @throws Error with mpicc's output. */
async function buildCLoop(dir: string): Promise<string> {
  const src = `${dir}/mpi_loop.c`, bin = `${dir}/mpi_loop`;
  await Deno.writeTextFile(src, await Deno.readTextFile(new URL('./mpi_loop.c', import.meta.url)));
  await run('mpicc', ['-O2', '-o', bin, src, '-lm'], 'mpicc -O2 mpi_loop.c');
  return bin;
}

/**
 * This project's `mpi` backend (helper thread): `mpirun -n p … bench comm --transport mpi --native-only`,
 * `entry` being the bench command's module (cli/bench.ts, which passes itself down: docs/design.md#layers).
 */
async function helperRows(o: CommBenchOptions, p: number, entry: URL): Promise<CommBenchRow[]> {
  const json = await Deno.makeTempFile({ suffix: '.json' });
  try {
    const b = o.budget;
    const args = ['-n', String(p), Deno.execPath(), 'run', '-A', entry.pathname];
    args.push('comm', '--transport', 'mpi', '--native-only', '--worlds', String(p), '--ops', o.collectives.join(','));
    args.push('--min-bytes', String(o.minBytes), '--max-bytes', String(o.maxBytes), '--step', String(o.step));
    args.push('--warmup', String(b.warmup), '--warmup-ms', String(b.warmupMs), '--min-iters', String(b.minIters));
    args.push('--min-ms', String(b.minMs), '--max-iters', String(b.maxIters), '--json', json);
    await run('mpirun', args, `mpirun -n ${p} bench comm --transport mpi --native-only`);
    return (JSON.parse(await Deno.readTextFile(json)).rows as CommBenchRow[])
      .map((r) => ({ ...r, source: 'helper-thread' as const }));
  } finally {
    await Deno.remove(json).catch(() => {});
  }
}

/**
 * Times MPI's own collective three ways at `o`'s world sizes, collectives and sizes, logs the
 * comparison with `rows` (mpiTable) and what could not run, and resolves to the MPI rows;
 * `entry` is the bench command's module (cli/bench.ts) for the helper-thread rows.
 * Without mpirun: no rows, a line saying why. Without mpicc (or with `noMpicc`): no C loop rows.
 * @throws Error when an mpirun job or the C build fails (its output included).
 */
export async function mpiComparison(
  o: CommBenchOptions & { noMpicc?: boolean },
  rows: CommBenchRow[],
  entry: URL,
): Promise<CommBenchRow[]> {
  const noMpirun = await missing('mpirun', 'mpich');
  if (noMpirun) {
    o.log(`\nMPICH comparison: ${noMpirun}`);
    return [];
  }
  const noMpicc = o.noMpicc ? 'skipped (--no-mpicc)' : await missing('mpicc', 'libmpich-dev');
  const dir = await Deno.makeTempDir({ prefix: 'bench-mpi-' });
  const out: CommBenchRow[] = [];
  try {
    const bin = noMpicc ? '' : await buildCLoop(dir);
    const sync = new URL('./mpi_sync_loop.ts', import.meta.url).pathname;
    for (const p of o.worlds) {
      const cases = o.collectives.flatMap((coll) => sweepSizes(o, coll, p).map((bytes) => ({ coll, bytes })));
      const args = loopArgs(o.budget, cases);
      if (bin) out.push(...parseLines(await run('mpirun', ['-n', String(p), bin, ...args], 'C loop'), p, 'c-loop'));
      const ffi = await run('mpirun', ['-n', String(p), Deno.execPath(), 'run', '-A', sync, ...args], 'FFI loop');
      out.push(...parseLines(ffi, p, 'ffi-sync'));
      out.push(...await helperRows(o, p, entry));
    }
  } finally {
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
  const calls = o.collectives.map((c) => `${c}: ${MPI_CALLS[c]}`).join(', ');
  o.log(
    `\nMPICH's own collective (${calls}) vs ours, median µs per call (mpirun -n p, same sizes and timing loop)` +
      `\n  ${SOURCE_LABELS['c-loop']}: ${noMpicc || 'a C loop of the call, built with mpicc -O2'}` +
      `\n  ${SOURCE_LABELS['ffi-sync']}: the same loop in Deno, each call synchronous through FFI` +
      `\n  ${SOURCE_LABELS['helper-thread']}: this project's mpi backend, each call on a Deno FFI helper thread` +
      `\n  "X vs Y": X's time over Y's in words (slower: X takes longer); shared, message: our fastest` +
      ` algorithm on that plane\n${mpiTable(rows, out)}`,
  );
  return out;
}
