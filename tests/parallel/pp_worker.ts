/**
 * Test-only pipeline rank worker: each rank has its own GPU (on the backend the test passes),
 * builds its GPT stages from the shared seed and trains them with the schedule named in the
 * args, returning per-step losses, norms, traffic and timelines, its step-0 gradients by name
 * and its final parameters by name.
 */
import { serveRank } from '../../src/comm/launch.ts';
import { parseConfig } from '../../src/train/config.ts';
import { CharTokenizer } from '../../src/data/tokenizer.ts';
import { TextDataset } from '../../src/data/dataset.ts';
import { checkPipeline, PipelineTrainer } from '../../src/parallel/pipeline.ts';
import type { PpArgs, PpResult } from './pp_harness.ts';
import { RANK_GPU_TASKS, rankGpu } from '../util/rank_gpu.ts';

serveRank({
  ...RANK_GPU_TASKS,
  async train(world, args: PpArgs): Promise<PpResult> {
    const cfg = parseConfig(args.cfg);
    checkPipeline(cfg, world.size, args.opts); // a bad plan fails before any stage is built
    const g = await rankGpu();
    const tok = CharTokenizer.fromText(args.text);
    const data = new TextDataset(tok.encode(args.text), cfg.blockSize);
    const t = new PipelineTrainer(g, data, cfg, tok.vocabSize, world, args.opts);
    const res: PpResult = { losses: [], gradNorms: [], sent: [], timelines: [], origins: [], grads0: {}, params: {} };
    try {
      for (let s = 0; s < cfg.steps; s++) {
        const rec = await t.step(s);
        res.losses.push(rec.loss);
        res.gradNorms.push(rec.gradNorm);
        res.sent.push(rec.sent);
        res.timelines.push(rec.timeline);
        res.origins.push(rec.origin);
        if (s === 0) res.grads0 = Object.fromEntries(await t.gradients());
      }
      res.params = Object.fromEntries(await t.parameters());
    } finally {
      t.destroy();
    }
    return res;
  },
});
