/**
 * Test-only mesh-trainer rank worker: opens its own GPU (lavapipe here) and trains its shard of
 * the plan in the args (mesh_rank.ts), as a real world's ranks do.
 */
import { serveRank } from '../../src/dist/launch.ts';
import { Gpu } from '../../src/gpu/context.ts';
import type { TrainConfig } from '../../src/train/config.ts';
import type { ParallelPlan } from '../../src/parallel/plan.ts';
import { type MeshRunResult, trainMeshRank } from './mesh_rank.ts';

let gpu: Promise<Gpu> | undefined;

serveRank({
  async train(world, args: { plan: ParallelPlan; cfg: Partial<TrainConfig>; text: string }): Promise<MeshRunResult> {
    gpu ??= Gpu.create({ backend: 'wgpu' });
    return trainMeshRank(await gpu, world, args.plan, args.cfg, args.text);
  },

  /** Destroys this rank's device before the world terminates the worker. */
  async close() {
    if (gpu) (await gpu).destroy();
    gpu = undefined;
  },
});
