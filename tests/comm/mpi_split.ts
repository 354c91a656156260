/**
 * The `split` task of tests/comm/mpi_rank.ts (docs/design.md#process-groups-are-mpi_comm_split-communicators): process
 * groups made by MPI_Comm_split at setup. Every rank splits a DeviceMesh's dp and tp groups, a lane of the tp groups
 * (same ranks, own communicator) and a family that leaves some ranks out, in reversed rank order; checks that each
 * split communicator agrees with its group (MPI_Comm_size, MPI_Comm_rank, the split counter); runs the collective
 * matrix through MPI's own collectives and this project's algorithms on every group at once; and checks the refusals: a
 * group that was not split, families that differ between ranks, overlapping groups, an id split twice — each an error
 * on every rank, never a hang.
 */
import { intOut, mpi } from '../../src/comm/mpi/libmpi.ts';
import type { MpiWorld } from '../../src/comm/mpi/world.ts';
import { DeviceMesh } from '../../src/comm/mesh.ts';
import { dimFamily, family, type GroupFamily } from '../../src/comm/groups.ts';
import { matrix, type Report } from '../../src/comm/scenarios.ts';

/** Runs the split checks on this rank; every rank of `w` must call it. */
export async function splitTask(w: MpiWorld): Promise<Report> {
  const n = w.size, rep: Report = { cases: 0, failures: [] };
  const fail = (what: string) => rep.failures.push(`rank ${w.rank}: ${what}`);
  const expect = async (what: string, p: Promise<unknown>, re: RegExp) => {
    rep.cases++;
    const e = await p.then(() => null, (e: Error) => e);
    if (!e || !re.test(e.message)) fail(`${what}: expected an error matching ${re}, got ${e?.message ?? 'success'}`);
  };
  // 4 ranks: dp 2 × tp 2; 2 ranks: tp 2 (dp groups of one rank).
  const mesh = new DeviceMesh(n === 4 ? [2, 1, 1, 2] : [1, 1, 1, n], n, w.rank);
  const families: GroupFamily[] = [
    dimFamily(mesh, 'dp'),
    dimFamily(mesh, 'tp'),
    dimFamily(mesh, 'tp', 'lane'),
    family('pair', [[n - 1, 0]]),
  ];
  const before = w.splits;
  await w.split(families);
  if (w.splits !== before + families.length) fail(`split counter ${w.splits}, expected ${before + families.length}`);
  const m = mpi();
  const mine = families.flatMap((f) => f.groups.filter((g) => g.ranks.includes(w.rank)));
  for (const f of families) {
    for (const g of f.groups) {
      rep.cases++;
      const comm = w.splitComm(g.id);
      if (!g.ranks.includes(w.rank)) {
        if (comm !== undefined) fail(`'${g.id}' has a communicator on a rank outside it`);
        continue;
      }
      if (comm === undefined) {
        fail(`'${g.id}' was not split`);
        continue;
      }
      const size = intOut((b) => m.MPI_Comm_size(comm, b), 'MPI_Comm_size');
      const rank = intOut((b) => m.MPI_Comm_rank(comm, b), 'MPI_Comm_rank');
      if (size !== g.ranks.length || rank !== g.ranks.indexOf(w.rank)) {
        fail(`'${g.id}': split communicator has size ${size}, rank ${rank}; group [${g.ranks}]`);
      }
    }
  }
  // Every group at once, each through MPI's collectives and then ours; tp and its lane share ranks.
  const reports = await Promise.all(mine.map(async (g) => {
    const c = w.world.newGroup(g.ranks, g.id);
    const a = await matrix(c, 'mpi'), b = await matrix(c);
    return { cases: a.cases + b.cases, failures: [...a.failures, ...b.failures].map((f) => `${g.id}: ${f}`) };
  }));
  for (const r of reports) {
    rep.cases += r.cases;
    rep.failures.push(...r.failures);
  }

  const adhoc = w.world.newGroup([...Array(n).keys()].reverse(), 'adhoc');
  await expect('an ad-hoc group', adhoc.allReduce(new Float32Array(4), { backend: 'mpi' }), /has no MPI communicator/);
  rep.cases++;
  const sum = await adhoc.allReduce(Float32Array.of(1), { backend: 'ours' }); // the refusal took no sequence number
  if (sum[0] !== n) fail(`the ad-hoc group's allReduce with ours gave ${sum[0]}`);
  const bad = [family(`bad${w.rank}`, [[...Array(n).keys()]])];
  await expect('families that differ', w.split(bad), /the ranks passed different group families/);
  const overlap = { name: 'overlap', groups: [{ id: 'o1', ranks: [0] }, { id: 'o2', ranks: [0] }] };
  await expect('overlapping groups', w.split([overlap]), /must be disjoint/);
  await expect('a group split twice', w.split([dimFamily(mesh, 'dp')]), /already split/);
  if (w.splits !== before + families.length) fail(`a refused split still counted: ${w.splits}`);
  await w.world.barrier({ backend: 'mpi' }); // the world is still in step after the refusals
  return rep;
}
