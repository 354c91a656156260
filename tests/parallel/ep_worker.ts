/**
 * Test-only rank worker for expert parallelism: each rank opens its own GPU, builds its shard
 * of the MoE GPT from the shared seed and trains it with ExpertParallelTrainer over the world.
 */
import { serveRank } from '../../src/dist/launch.ts';
import { Gpu } from '../../src/gpu/context.ts';
import { parseConfig } from '../../src/train/config.ts';
import { CharTokenizer } from '../../src/data/tokenizer.ts';
import { TextDataset } from '../../src/data/dataset.ts';
import { expertOf, GPTMoE } from '../../src/models/moe.ts';
import { expertParallelGroup, ExpertParallelTrainer, expertShard } from '../../src/parallel/expert_parallel.ts';
import { makePlan } from '../../src/parallel/plan.ts';
import { byName, type EpArgs, type EpResult, gptConfig } from './ep_harness.ts';

let gpu: Promise<Gpu> | undefined;

serveRank({
  async train(world, args: EpArgs): Promise<EpResult> {
    gpu ??= Gpu.create({ backend: 'wgpu' });
    const g = await gpu;
    const cfg = parseConfig(args.cfg);
    const tok = CharTokenizer.fromText(args.text);
    const data = new TextDataset(tok.encode(args.text), cfg.blockSize);
    const group = expertParallelGroup(world, makePlan({ dp: world.size, ep: world.size }));
    const model = new GPTMoE(g, gptConfig(cfg, tok.vocabSize), args.moe, cfg.seed, expertShard(args.moe.nExpert, group.size, group.rank));
    const t = new ExpertParallelTrainer(g, model, data, cfg, group);
    const res: EpResult = { losses: [], gradNorms: [], sent: [], grads0: {}, params: {}, dense: 0 };
    res.dense = model.params.params.filter((p) => !expertOf(p.name)).reduce((a, p) => a + p.size, 0);
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

  async close() {
    if (gpu) (await gpu).destroy();
    gpu = undefined;
  },
});
