/**
 * The comm suite's comparison tables (docs/design.md#the-shared-data-plane-of-worker-ranks): the shared and message
 * data planes side by side, and MPICH's own collectives at the same sizes and world sizes (mpi_ref.ts), each called
 * three ways. Every figure is a median µs per call (the slowest rank's); every ratio is a time ratio, ours ÷ the
 * reference, printed with the word it means ("slower" / "faster").
 */
import type { CommBenchRow, MpiSource } from './comm.ts';
import { fmtBytes, us } from './comm.ts';

/** Text columns (the first `left`) padded at the end, numbers at the start. */
function table(header: string[], cells: string[][], left: number): string {
  const widths = header.map((h, i) => Math.max(h.length, ...cells.map((r) => r[i].length)));
  const line = (c: string[]) => c.map((x, i) => (i < left ? x.padEnd(widths[i]) : x.padStart(widths[i]))).join('  ');
  return [line(header), widths.map((w) => '-'.repeat(w)).join('  '), ...cells.map(line)].join('\n');
}

const key = (r: CommBenchRow) => `${r.p}|${r.coll}|${r.algorithm}|${r.bytes}`;

/**
 * `ours` ÷ `ref` as words: "3.10× slower" when ours takes longer, "1.50× faster" when it takes
 * less (the reference's time over ours), "same" within 0.5 %.
 */
export function timeRatio(ours: number, ref: number): string {
  const r = ours / ref;
  if (Math.abs(r - 1) < 0.005) return 'same';
  return r > 1 ? `${r.toFixed(2)}× slower` : `${(1 / r).toFixed(2)}× faster`;
}

/** Shared vs message plane per (world, collective, algorithm, S): median µs per call each, and the shared plane's time against the message plane's. */
export function planeTable(rows: CommBenchRow[]): string {
  const msg = new Map(rows.filter((r) => r.plane === 'message').map((r) => [key(r), r]));
  const cells = rows.filter((r) => r.plane === 'shared' && msg.has(key(r))).map((r) => {
    const m = msg.get(key(r))!;
    return [
      fmtBytes(r.bytes),
      `${r.coll} p=${r.p}`,
      r.algorithm,
      us(r.median),
      us(m.median),
      timeRatio(r.median, m.median),
    ];
  });
  return table(['size', 'collective', 'algorithm', 'shared µs', 'message µs', 'shared vs message'], cells, 3);
}

/** Column labels of the three ways MPI is called (comm.ts MpiSource). */
export const SOURCE_LABELS: Record<MpiSource, string> = {
  'c-loop': 'MPI (C loop)',
  'ffi-sync': 'MPI (FFI, sync)',
  'helper-thread': 'MPI via our helper thread',
};

/** The same, short, for the ratio columns' headers. */
const SHORT: Record<MpiSource, string> = { 'c-loop': 'C loop', 'ffi-sync': 'FFI sync', 'helper-thread': 'helper' };

/** The MPI call behind each collective's MPI columns. */
export const MPI_CALLS: Record<string, string> = {
  allReduce: 'MPI_Allreduce',
  reduceScatter: 'MPI_Reduce_scatter_block',
  allGather: 'MPI_Allgather',
  broadcast: 'MPI_Bcast',
  reduce: 'MPI_Reduce',
  allToAll: 'MPI_Alltoall',
};

/**
 * MPI's own collective three ways beside the fastest of our algorithms per plane, at each
 * (world, collective, S) an MPI row has, median µs per call; then the first plane's time (the
 * shared plane's when timed) over each directly called MPI (C loop, FFI sync: like for like, a
 * loop of calls with nothing between), and the helper thread's time over the FFI sync call
 * (what the helper costs).
 * @param mpiRows rows with `source` set; a source with no rows gets no columns.
 */
export function mpiTable(rows: CommBenchRow[], mpiRows: CommBenchRow[]): string {
  const best = new Map<string, CommBenchRow>();
  for (const r of rows) {
    const k = `${r.plane}|${r.p}|${r.coll}|${r.bytes}`;
    if (!best.has(k) || best.get(k)!.median > r.median) best.set(k, r);
  }
  const planes = [...new Set(rows.map((r) => r.plane ?? 'message'))];
  const sources = (['c-loop', 'ffi-sync', 'helper-thread'] as const).filter((s) => mpiRows.some((m) => m.source === s));
  const mpi = new Map(mpiRows.map((m) => [`${m.source}|${m.p}|${m.coll}|${m.bytes}`, m]));
  const cases = [...new Map(mpiRows.map((m) => [`${m.p}|${m.coll}|${m.bytes}`, m])).values()];
  const header = ['size', 'collective', ...sources.map((s) => `${SOURCE_LABELS[s]} µs`)];
  for (const p of planes) header.push(`${p} µs (algorithm)`);
  const direct = sources.filter((s) => s !== 'helper-thread');
  // Ratios for the first plane only (shared when timed): the plane table compares the planes.
  for (const s of direct) header.push(`${planes[0]} vs ${SHORT[s]}`);
  const helperVsSync = sources.includes('helper-thread') && sources.includes('ffi-sync');
  if (helperVsSync) header.push('helper vs FFI sync');
  const cells = cases.map((c) => {
    const at = (s: MpiSource) => mpi.get(`${s}|${c.p}|${c.coll}|${c.bytes}`);
    const cell = [fmtBytes(c.bytes), `${c.coll} p=${c.p}`, ...sources.map((s) => at(s) ? us(at(s)!.median) : '-')];
    const ours = planes.map((p) => best.get(`${p}|${c.p}|${c.coll}|${c.bytes}`));
    for (const o of ours) cell.push(o ? `${us(o.median)} (${o.algorithm})` : '-');
    for (const s of direct) cell.push(ours[0] && at(s) ? timeRatio(ours[0].median, at(s)!.median) : '-');
    if (helperVsSync) {
      const h = at('helper-thread'), y = at('ffi-sync');
      cell.push(h && y ? timeRatio(h.median, y.median) : '-');
    }
    return cell;
  });
  return table(header, cells, 2);
}
