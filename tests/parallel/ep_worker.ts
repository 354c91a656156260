/**
 * Test-only rank worker for expert parallelism: each rank opens its own GPU and trains its shard
 * of the MoE model (gpt-moe or mamba-moe; experts of its EP index) with the mesh trainer over
 * the world (dp = world size, ep = args.ep, micro-batches = the config's gradAccum).
 */
import { serveRank } from '../../src/comm/launch.ts';
import { expertOf } from '../../src/models/moe.ts';
import { MeshTrainer } from '../../src/parallel/mesh/mesh_trainer.ts';
import { trainerConfig } from '../../src/parallel/run/run.ts';
import { type EpArgs, epData, epPlan, type EpResult } from './ep_harness.ts';
import { RANK_GPU_TASKS, rankGpu } from '../util/rank_gpu.ts';

serveRank({
  ...RANK_GPU_TASKS,
  async train(world, args: EpArgs): Promise<EpResult> {
    const g = await rankGpu();
    const { cfg, vocabSize, data } = epData(args);
    const plan = epPlan(args, world.size);
    const t = new MeshTrainer(g, trainerConfig(plan, cfg), plan, world, data, vocabSize);
    const res: EpResult = { losses: [], gradNorms: [], sent: [], grads0: {}, params: {}, dense: 0, expert: 0 };
    for (const p of t.stages.params.params) res[expertOf(p.name) ? 'expert' : 'dense'] += p.size;
    try {
      for (let s = 0; s < cfg.steps; s++) {
        const rec = await t.step(s);
        res.losses.push(rec.loss);
        res.gradNorms.push(rec.gradNorm);
        res.sent.push(rec.sent);
        if (s === 0) res.grads0 = Object.fromEntries(await t.gradients());
      }
      res.params = Object.fromEntries(await t.parameters());
    } finally {
      t.destroy();
    }
    return res;
  },
});
