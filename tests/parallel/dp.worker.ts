/**
 * Test-only rank worker for data parallelism and ZeRO: each rank opens its own GPU (on the
 * backend the test passes), builds the same tiny GPT from the same seed and trains it with the
 * strategy named in the args, returning per-step losses, norms and traffic, and (rank 0) the
 * final parameters.
 */
import { serveRank } from '../../src/comm/launch.ts';
import { parseConfig } from '../../src/train/config.ts';
import { createModel } from '../../src/models/registry.ts';
import { CharTokenizer } from '../../src/data/tokenizer.ts';
import { TextDataset } from '../../src/data/dataset.ts';
import { DataParallelTrainer } from '../../src/parallel/data_parallel.ts';
import { type ZeroStage, ZeroTrainer } from '../../src/parallel/zero.ts';
import type { RunArgs, RunResult } from './harness.ts';
import { RANK_GPU_TASKS, rankGpu } from '../util/rank_gpu.ts';
import { recordRows } from './rows.ts';

serveRank({
  ...RANK_GPU_TASKS,
  async train(world, args: RunArgs): Promise<RunResult> {
    const g = await rankGpu();
    const cfg = parseConfig(args.cfg);
    const tok = CharTokenizer.fromText(args.text);
    const data = new TextDataset(tok.encode(args.text), cfg.blockSize);
    const model = createModel(g, cfg, tok.vocabSize);
    const rows = args.recordRows ? recordRows(model) : undefined;
    const opts = { bucketBytes: args.bucketBytes };
    const t = args.stage
      ? await ZeroTrainer.create(g, model, data, cfg, world, { ...opts, stage: args.stage as ZeroStage })
      : new DataParallelTrainer(g, model, data, cfg, world, opts);
    const res: RunResult = {
      losses: [],
      gradNorms: [],
      sent: [],
      launched: [],
      order: [],
      buckets: t.buckets.map((b) => b.end - b.start),
      params: null,
      flat: model.params.flatSize,
      shard: 0,
    };
    for (let s = 0; s < cfg.steps; s++) {
      const rec = await t.step(s);
      res.losses.push(rec.loss);
      res.gradNorms.push(rec.gradNorm);
      res.sent.push(rec.sent);
      res.launched.push(rec.overlap.launchedDuringBackward);
      res.order.push(rec.overlap.order);
      if (s === 0) {
        const grads = await t.gradients();
        if (world.rank === 0) res.grads0 = grads;
      }
    }
    res.rows = rows;
    const params = await t.parameters();
    if (world.rank === 0) res.params = params;
    if (t instanceof ZeroTrainer) {
      res.shard = t.shard;
      res.memory = t.memory();
    }
    if (t instanceof ZeroTrainer) t.destroy();
    else model.params.destroy();
    return res;
  },
});
