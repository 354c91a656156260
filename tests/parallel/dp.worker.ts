/**
 * Test-only rank worker for data parallelism and ZeRO: each rank opens its own GPU (on the
 * backend the test passes), builds the same tiny GPT from the same seed and trains it — with the
 * mesh trainer over dp (DDP's overlapped buckets), or ZeRO at the stage named in the args —
 * returning per-step losses, norms and traffic, and (rank 0) the final parameters.
 */
import { serveRank } from '../../src/comm/launch.ts';
import { parseConfig } from '../../src/train/config.ts';
import { createModel } from '../../src/models/registry.ts';
import { CharTokenizer } from '../../src/data/tokenizer.ts';
import { TextDataset } from '../../src/data/dataset.ts';
import { MeshTrainer } from '../../src/parallel/mesh_trainer.ts';
import { makePlan } from '../../src/parallel/plan.ts';
import { type ZeroStage, ZeroTrainer } from '../../src/parallel/zero.ts';
import type { RunArgs, RunResult } from './harness.ts';
import type { Gpu } from '../../src/gpu/context.ts';
import type { Tensor } from '../../src/gpu/tensor.ts';
import type { Communicator } from '../../src/comm/communicator.ts';
import type { TrainConfig } from '../../src/train/config.ts';
import type { ParallelStepRecord } from '../../src/parallel/data_parallel.ts';
import type { Bucket } from '../../src/parallel/buckets.ts';
import { RANK_GPU_TASKS, rankGpu } from '../util/rank_gpu.ts';
import { recordRows } from './rows.ts';

serveRank({
  ...RANK_GPU_TASKS,
  async train(world, args: RunArgs): Promise<RunResult> {
    const g = await rankGpu();
    const cfg = parseConfig(args.cfg);
    const tok = CharTokenizer.fromText(args.text);
    const data = new TextDataset(tok.encode(args.text), cfg.blockSize);
    const opts = { bucketBytes: args.bucketBytes };
    if (!args.stage) return await meshRank(g, world, cfg, data, tok.vocabSize, args);
    const model = createModel(g, cfg, tok.vocabSize);
    const rows = args.recordRows ? recordRows(model) : undefined;
    const t = await ZeroTrainer.create(g, model, data, cfg, world, { ...opts, stage: args.stage as ZeroStage });
    const res = emptyResult(t.buckets, model.params.flatSize);
    for (let s = 0; s < cfg.steps; s++) {
      record(res, await t.step(s));
      if (s === 0) {
        const grads = await t.gradients();
        if (world.rank === 0) res.grads0 = grads;
      }
    }
    res.rows = rows;
    const params = await t.parameters();
    if (world.rank === 0) res.params = params;
    res.shard = t.shard;
    res.memory = t.memory();
    t.destroy();
    return res;
  },
});

/** A result with no steps yet, for `buckets` over a flat buffer of `flat` elements. */
function emptyResult(buckets: readonly Bucket[], flat: number): RunResult {
  const sizes = buckets.map((b) => b.end - b.start);
  return { losses: [], gradNorms: [], sent: [], launched: [], order: [], buckets: sizes, params: null, flat, shard: 0 };
}

/** Appends one step's loss, norm, traffic and bucket launches to `res`. */
function record(res: RunResult, rec: ParallelStepRecord): void {
  res.losses.push(rec.loss);
  res.gradNorms.push(rec.gradNorm);
  res.sent.push(rec.sent);
  res.launched.push(rec.overlap.launchedDuringBackward);
  res.order.push(rec.overlap.order);
}

/** Data parallelism alone: the mesh trainer over dp ranks, gradients in overlapped buckets. */
async function meshRank(
  g: Gpu,
  world: Communicator,
  cfg: TrainConfig,
  data: TextDataset,
  vocabSize: number,
  args: RunArgs,
): Promise<RunResult> {
  const plan = makePlan({ dp: world.size, microBatches: cfg.gradAccum });
  const t = new MeshTrainer(g, cfg, plan, world, data, vocabSize, { bucketBytes: args.bucketBytes });
  const store = t.stages.params, buckets = t.sync.buckets!;
  const rows: number[][] | undefined = args.recordRows ? [] : undefined;
  if (rows) {
    // The first stage's embedding reads every micro-batch's host tokens: this rank's rows.
    const embed = t.stages.embed.bind(t.stages);
    t.stages.embed = (tape, host, b, tt) => (rows.push(Array.from(host)), embed(tape, host, b, tt));
  }
  const res = emptyResult(buckets, store.flatSize);
  const read = async (t: Tensor) => await g.read(t) as Float32Array;
  for (let s = 0; s < cfg.steps; s++) {
    record(res, await t.step(s));
    if (s === 0 && world.rank === 0) res.grads0 = await read(store.grads);
  }
  res.rows = rows;
  if (world.rank === 0) res.params = await read(store.values);
  t.destroy();
  return res;
}
