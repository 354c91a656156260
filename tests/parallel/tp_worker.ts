/**
 * Test-only tensor-parallel rank worker: opens its own GPU (on the backend the test passes), builds the full
 * tiny GPT from the config's seed, keeps its shard and trains it (tp_harness.ts trainRank).
 */
import { serveRank } from '../../src/comm/launch.ts';
import type { TrainConfig } from '../../src/train/config.ts';
import { trainRank, type TpRunResult } from './tp_harness.ts';
import { RANK_GPU_TASKS, rankGpu } from '../util/rank_gpu.ts';

serveRank({
  ...RANK_GPU_TASKS,
  async train(world, args: { cfg: Partial<TrainConfig>; text: string; sp: boolean }): Promise<TpRunResult> {
    return trainRank(await rankGpu(), world, args.cfg, args.text, args.sp);
  },
});
