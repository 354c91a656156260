/**
 * Test-only rank worker for expert parallelism: each rank opens its own GPU, builds its shard
 * of the MoE model (gpt-moe or mamba-moe) from the shared seed and trains it with
 * ExpertParallelTrainer over the world (dp = world size, ep = args.ep).
 */
import { serveRank } from '../../src/comm/launch.ts';
import { expertOf } from '../../src/models/moe.ts';
import { createMoEModel } from '../../src/models/registry.ts';
import { expertParallelGroups, ExpertParallelTrainer, expertShard } from '../../src/parallel/expert_parallel.ts';
import { makePlan } from '../../src/parallel/plan.ts';
import { byName, type EpArgs, epData, type EpResult } from './ep_harness.ts';
import { RANK_GPU_TASKS, rankGpu } from '../util/rank_gpu.ts';

serveRank({
  ...RANK_GPU_TASKS,
  async train(world, args: EpArgs): Promise<EpResult> {
    const g = await rankGpu();
    const { cfg, vocabSize, data } = epData(args);
    const groups = expertParallelGroups(world, makePlan({ dp: world.size, ep: args.ep ?? world.size }));
    const model = createMoEModel(g, cfg, vocabSize, {
      shard: expertShard(cfg.nExpert, groups.ep.size, groups.ep.rank),
    });
    const t = new ExpertParallelTrainer(g, model, data, cfg, groups);
    const res: EpResult = { losses: [], gradNorms: [], sent: [], grads0: {}, params: {}, dense: 0, expert: 0 };
    for (const p of model.params.params) res[expertOf(p.name) ? 'expert' : 'dense'] += p.size;
    for (let s = 0; s < cfg.steps; s++) {
      const rec = await t.step(s);
      res.losses.push(rec.loss);
      res.gradNorms.push(rec.gradNorm);
      res.sent.push(rec.sent);
      if (s === 0) res.grads0 = byName(model, await t.gradients());
    }
    res.params = byName(model, Float32Array.from(await g.read(model.params.values)));
    model.params.destroy();
    return res;
  },
});
