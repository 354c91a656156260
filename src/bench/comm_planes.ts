/**
 * The comm suite's comparisons (docs/design.md §31): the shared and message data planes side by
 * side, and MPICH's own collectives at the same sizes and world sizes in the same run, run as
 * `mpirun -n p … bench comm --transport mpi --native-only` (comm_mpi.ts) when mpirun is installed.
 * Ratios are speeds: MPI's time over ours, so ≥ 1 means ours is at least as fast.
 */
import type { CommBenchOptions, CommBenchRow } from './comm.ts';
import { fmtBytes } from './comm.ts';

const f = (x: number) => (x >= 100 ? x.toFixed(0) : x >= 1 ? x.toFixed(2) : x.toPrecision(3));
const us = (ms: number) => f(ms * 1e3);

function table(header: string[], cells: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...cells.map((r) => r[i].length)));
  const line = (c: string[]) => c.map((x, i) => (i < 3 ? x.padEnd(widths[i]) : x.padStart(widths[i]))).join('  ');
  return [line(header), widths.map((w) => '-'.repeat(w)).join('  '), ...cells.map(line)].join('\n');
}

const key = (r: CommBenchRow) => `${r.p}|${r.coll}|${r.algorithm}|${r.bytes}`;

/** Shared vs message plane per (world, collective, algorithm, S): µs per call each and message/shared. */
export function planeTable(rows: CommBenchRow[]): string {
  const msg = new Map(rows.filter((r) => r.plane === 'message').map((r) => [key(r), r]));
  const cells = rows.filter((r) => r.plane === 'shared' && msg.has(key(r))).map((r) => {
    const m = msg.get(key(r))!;
    return [fmtBytes(r.bytes), `${r.coll} p=${r.p}`, r.algorithm, us(r.ms), us(m.ms), (m.ms / r.ms).toFixed(2)];
  });
  return table(['size', 'collective', 'algorithm', 'shared µs', 'message µs', 'shared speed-up'], cells);
}

/**
 * MPI's own collective beside the fastest of our algorithms per plane at each (world, collective, S):
 * the ratio is MPI's time over ours (≥ 1: ours at least as fast).
 */
export function mpiTable(rows: CommBenchRow[], mpiRows: CommBenchRow[]): string {
  const best = new Map<string, CommBenchRow>();
  for (const r of rows) {
    const k = `${r.plane}|${r.p}|${r.coll}|${r.bytes}`;
    if (!best.has(k) || best.get(k)!.ms > r.ms) best.set(k, r);
  }
  const planes = [...new Set(rows.map((r) => r.plane ?? 'message'))];
  const header = ['size', 'collective', 'MPI µs'];
  for (const p of planes) header.push(`${p} µs (algorithm)`, `${p} vs MPI`);
  const cells = mpiRows.map((m) => {
    const c = [fmtBytes(m.bytes), `${m.coll} p=${m.p}`, us(m.ms)];
    for (const p of planes) {
      const o = best.get(`${p}|${m.p}|${m.coll}|${m.bytes}`);
      c.push(o ? `${us(o.ms)} (${o.algorithm})` : '-', o ? `${(m.ms / o.ms).toFixed(2)}×` : '-');
    }
    return c;
  });
  return table(header, cells);
}

/** Whether `mpirun` runs here ('' when it does, else why not). */
async function mpirunMissing(): Promise<string> {
  try {
    const out = await new Deno.Command('mpirun', { args: ['--version'], stdout: 'null', stderr: 'null' }).output();
    return out.success ? '' : 'mpirun --version failed';
  } catch {
    return 'mpirun is not installed (Debian: apt-get install mpich)';
  }
}

/**
 * MPI's own collectives (backend `mpi`) at the sizes and world sizes of `o`, one `mpirun -n p`
 * job per world size; resolves to their rows, or to the reason there are none.
 * @throws Error when an mpirun job fails (its output included).
 */
export async function mpiRows(o: CommBenchOptions): Promise<CommBenchRow[] | string> {
  const why = await mpirunMissing();
  if (why) return why;
  const out: CommBenchRow[] = [];
  for (const p of o.worlds) {
    const json = await Deno.makeTempFile({ suffix: '.json' });
    try {
      const args = [
        '-n',
        String(p),
        Deno.execPath(),
        'run',
        '-A',
        new URL('../cli/bench.ts', import.meta.url).pathname,
      ];
      args.push('comm', '--transport', 'mpi', '--native-only', '--worlds', String(p), '--ops', o.collectives.join(','));
      args.push('--min-bytes', String(o.minBytes), '--max-bytes', String(o.maxBytes), '--step', String(o.step));
      if (o.iters) args.push('--iters', String(o.iters));
      args.push('--json', json);
      const res = await new Deno.Command('mpirun', { args, stdout: 'piped', stderr: 'piped' }).output();
      if (!res.success) {
        const dec = new TextDecoder();
        throw new Error(
          `mpirun -n ${p} bench comm --transport mpi failed:\n${dec.decode(res.stderr)}${dec.decode(res.stdout)}`,
        );
      }
      out.push(...(JSON.parse(await Deno.readTextFile(json)).rows as CommBenchRow[]));
    } finally {
      await Deno.remove(json).catch(() => {});
    }
  }
  return out;
}
