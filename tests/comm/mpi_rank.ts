/**
 * One rank of an MPI test job (tests/comm/mpi.test.ts starts it under `mpirun -n N`): joins the
 * MPI world and runs the task named by argv[0] — `matrix`, every collective × algorithm × op ×
 * dtype × in/out of place checked on the rank against the CPU reference (src/comm/scenarios.ts),
 * `native`, the same with MPI's own collectives (backend `mpi`), or `groups`, both at once in
 * two concurrent communicators over each of two disjoint subset groups, or `split`, process groups
 * made by MPI_Comm_split (tests/comm/mpi_split.ts) — then prints one JSON line
 * `{"rank":r,"size":n,"report":{…}}` and finalizes.
 */
import { mpiWorld } from '../../src/comm/mpi/world.ts';
import { matrix, type Report } from '../../src/comm/scenarios.ts';
import { family } from '../../src/comm/groups.ts';
import { splitTask } from './mpi_split.ts';

const task = Deno.args[0];
const w = await mpiWorld({ timeoutMs: 60_000 }, 'mpirun -n N deno run -A tests/comm/mpi_rank.ts matrix');
let report: Report;
if (task === 'matrix') report = await matrix(w.world);
else if (task === 'native') report = await matrix(w.world, 'mpi');
else if (task === 'groups') {
  // Disjoint groups covering the world, in a scrambled order, run the matrix at the same time.
  const order = [...Array(w.size).keys()].reverse();
  const half = Math.ceil(w.size / 2);
  const mine = order.slice(0, half).includes(w.rank) ? order.slice(0, half) : order.slice(half);
  const other = order.filter((r) => !mine.includes(r));
  // The MPI collectives' groups are split at setup, by every rank
  // (docs/design.md#process-groups-are-mpi_comm_split-communicators).
  await w.split([family('g', [mine, other].sort((a, b) => a[0] - b[0]))]);
  const g = w.world.newGroup(mine, `g[${mine}]`);
  // Both backends at once: the groups interleave MPI's collectives and this project's algorithms.
  const [a, b] = await Promise.all([matrix(g, 'mpi'), matrix(w.world.newGroup(mine, `h${mine[0]}`))]);
  report = { cases: a.cases + b.cases, failures: [...a.failures, ...b.failures] };
} else if (task === 'split') report = await splitTask(w);
else throw new Error(`mpi_rank: unknown task '${task}' (matrix, native, groups, split)`);
console.log(JSON.stringify({ rank: w.rank, size: w.size, report }));
await w.finalize();
