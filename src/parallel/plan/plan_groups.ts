/**
 * Every process group a run of a plan makes, as the families the MPI world splits at setup
 * (docs/design.md#process-groups-are-mpi_comm_split-communicators): one MPI_Comm_split per mesh dimension, as
 * picotron's process_group_manager does, plus the trainer's other groups (the dp·cp gradient-sync group, the embedding
 * and shared-weight groups, the expert groups) and every sub-group lane (data_parallel.ts subGroup): a lane has the
 * ranks of its group but its own call order, so it needs its own MPI communicator, and concurrent lanes on one
 * communicator could reach MPI in different orders on different ranks.
 *
 * The ids are those rank_model.ts, grad_sync.ts, zero_sync.ts, outer_sync.ts, rank_context.ts,
 * mesh_trainer.ts and mesh_eval.ts give their groups; tests/parallel/plan_groups.test.ts checks
 * that every group a traced run calls a collective on is here.
 */
import { dimFamily, family, type GroupFamily } from '../../comm/groups.ts';
import { type ParallelPlan, planGroup, planMesh, planWorldSize } from './plan.ts';

/** Lanes of each family: '' is the group itself. */
const WORLD_LANES = ['scalars', 'scalars/eval'];
const SYNC_LANES = ['', 'grads', 'params', 'eval', 'outer'];
const PP_LANES = ['', 'eval'];
const CP_LANES = ['', 'attn', 'attn/eval'];
const TP_LANES = ['', 'act', 'ce', 'act/eval', 'ce/eval', 'sp-grads'];

/**
 * The families of every group a run of `plan` makes (the world's own `world` family is split by
 * comm/mpi/world.ts mpiWorld and is not repeated here), in an order every rank computes alike.
 * Pure arithmetic on the plan; every family is disjoint (groups.ts checkFamilies).
 */
export function planGroupFamilies(plan: ParallelPlan): GroupFamily[] {
  const mesh = planMesh(plan), n = planWorldSize(plan);
  const out: GroupFamily[] = WORLD_LANES.map((lane) => ({
    name: `world/${lane}`,
    groups: [{ id: `world/${lane}`, ranks: [...Array(n).keys()] }],
  }));
  const lanes = (prefix: string, groups: number[][], names: readonly string[]) => {
    for (const lane of names) out.push(family(prefix, groups, lane));
  };
  // The gradient-sync group: the dp·cp ranks holding one shard, dp-major; named dp[…] without cp.
  const dpcp = distinct(n, (r) => planGroup(plan, 'dp', r).flatMap((d) => planGroup(plan, 'cp', d)));
  if (plan.cp > 1) {
    out.push(dimFamily(mesh, 'dp'));
    lanes('dpcp', dpcp, SYNC_LANES);
  } else lanes('dp', dpcp, SYNC_LANES);
  lanes('pp', mesh.groups('pp'), PP_LANES);
  lanes('cp', mesh.groups('cp'), CP_LANES);
  lanes('tp', mesh.groups('tp'), TP_LANES);
  if (plan.pp > 1) {
    out.push(family('shared', mesh.groups('pp')));
    // First and last pipeline rank of every pipeline: the tied embedding's gradient.
    out.push(family('embedding', mesh.groups('pp').map((g) => [g[0], g[g.length - 1]])));
  }
  if (plan.ep > 1) {
    lanes('ep', distinct(n, (r) => planGroup(plan, 'ep', r)), ['', 'moe']);
    // The dp ranks holding the same experts: every ep-th rank of the dp group.
    const edp = distinct(n, (r) => {
      const dp = planGroup(plan, 'dp', r), d = mesh.coords(r).dp;
      return dp.filter((_, i) => i % plan.ep === d % plan.ep);
    });
    // Under ZeRO the experts are sharded over edp too (zero_groups.ts): its grads, params and eval lanes.
    if (edp[0].length > 1) lanes('edp', edp, ['', 'experts', ...(plan.zero ? ['grads', 'params', 'eval'] : [])]);
  }
  return out;
}

/** The distinct groups `of(r)` over ranks 0…n−1, in order of their first rank. */
function distinct(n: number, of: (r: number) => number[]): number[][] {
  const seen = new Map<string, number[]>();
  for (let r = 0; r < n; r++) {
    const g = of(r);
    if (!seen.has(g.join())) seen.set(g.join(), g);
  }
  return [...seen.values()];
}
