/**
 * Test-only tensor-parallel rank worker: opens its own GPU (lavapipe here), builds the full
 * tiny GPT from the config's seed, keeps its shard and trains it (tp_harness.ts trainRank).
 */
import { serveRank } from '../../src/dist/launch.ts';
import { Gpu } from '../../src/gpu/context.ts';
import type { TrainConfig } from '../../src/train/config.ts';
import { trainRank, type TpRunResult } from './tp_harness.ts';

let gpu: Promise<Gpu> | undefined;

serveRank({
  async train(world, args: { cfg: Partial<TrainConfig>; text: string; sp: boolean }): Promise<TpRunResult> {
    gpu ??= Gpu.create({ backend: 'wgpu' });
    return trainRank(await gpu, world, args.cfg, args.text, args.sp);
  },

  /** Destroys this rank's device before the world terminates the worker (a live device at exit can crash teardown). */
  async close() {
    if (gpu) (await gpu).destroy();
    gpu = undefined;
  },
});
