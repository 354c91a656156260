/**
 * Test-only mesh-trainer rank worker: opens its own GPU (on the backend the test passes) and trains its shard of
 * the plan in the args (mesh_rank.ts), as a real world's ranks do.
 */
import { serveRank } from '../../src/comm/launch.ts';
import type { TrainConfig } from '../../src/train/config.ts';
import type { ParallelPlan } from '../../src/parallel/plan/plan.ts';
import { type MeshRunResult, trainMeshRank } from './mesh_rank.ts';
import { RANK_GPU_TASKS, rankGpu } from '../util/rank_gpu.ts';

serveRank({
  ...RANK_GPU_TASKS,
  async train(world, args: { plan: ParallelPlan; cfg: Partial<TrainConfig>; text: string }): Promise<MeshRunResult> {
    return trainMeshRank(await rankGpu(), world, args.plan, args.cfg, args.text);
  },
});
