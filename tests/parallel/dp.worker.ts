/**
 * Test-only rank worker for data parallelism and ZeRO: each rank opens its own GPU (lavapipe
 * here), builds the same tiny GPT from the same seed and trains it with the strategy named in
 * the args, returning per-step losses, norms and traffic, and (rank 0) the final parameters.
 */
import { serveRank } from '../../src/dist/launch.ts';
import { Gpu } from '../../src/gpu/context.ts';
import type { Backend } from '../../src/gpu/device.ts';
import { parseConfig } from '../../src/train/config.ts';
import { createModel } from '../../src/models/registry.ts';
import { CharTokenizer } from '../../src/data/tokenizer.ts';
import { TextDataset } from '../../src/data/dataset.ts';
import { DataParallelTrainer } from '../../src/parallel/data_parallel.ts';
import { type ZeroStage, ZeroTrainer } from '../../src/parallel/zero.ts';
import type { RunArgs, RunResult } from './harness.ts';

let gpu: Promise<Gpu> | undefined;

serveRank({
  async train(world, args: RunArgs): Promise<RunResult> {
    gpu ??= Gpu.create({ backend: (args.backend ?? 'wgpu') as Backend });
    const g = await gpu;
    const cfg = parseConfig(args.cfg);
    const tok = CharTokenizer.fromText(args.text);
    const data = new TextDataset(tok.encode(args.text), cfg.blockSize);
    const model = createModel(g, cfg, tok.vocabSize);
    const opts = { bucketBytes: args.bucketBytes };
    const t = args.stage
      ? await ZeroTrainer.create(g, model, data, cfg, world, { ...opts, stage: args.stage as ZeroStage })
      : new DataParallelTrainer(g, model, data, cfg, world, opts);
    const res: RunResult = { losses: [], gradNorms: [], sent: [], launched: [], order: [], buckets: t.buckets.map((b) => b.end - b.start), params: null, flat: model.params.flatSize, shard: 0 };
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

  /** Destroys this rank's device before the world terminates the worker (a live device at exit can crash teardown). */
  async close() {
    if (gpu) (await gpu).destroy();
    gpu = undefined;
  },
});
