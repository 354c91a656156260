/**
 * Test-only rank worker for data parallelism and ZeRO: each rank opens its own GPU (on the
 * backend the test passes), builds the same tiny GPT from the same seed and trains it on the
 * mesh trainer over dp — DDP's overlapped buckets, or ZeRO at the stage named in the args —
 * returning per-step losses, norms and traffic, and (rank 0) the final parameters.
 */
import { serveRank } from '../../src/comm/launch.ts';
import { parseConfig } from '../../src/train/config.ts';
import { CharTokenizer } from '../../src/data/tokenizer.ts';
import { TextDataset } from '../../src/data/dataset.ts';
import { type MeshStepRecord, MeshTrainer } from '../../src/parallel/mesh/mesh_trainer.ts';
import { makePlan } from '../../src/parallel/plan/plan.ts';
import type { RunArgs, RunResult } from './harness.ts';
import type { ZeroMemory } from '../../src/parallel/zero/zero_pieces.ts';
import { RANK_GPU_TASKS, rankGpu } from '../util/rank_gpu.ts';

serveRank({
  ...RANK_GPU_TASKS,
  async train(world, args: RunArgs): Promise<RunResult> {
    const g = await rankGpu();
    const cfg = parseConfig(args.cfg);
    const tok = CharTokenizer.fromText(args.text);
    const data = new TextDataset(tok.encode(args.text), cfg.blockSize);
    const plan = makePlan({ dp: world.size, zero: (args.stage ?? 0) as 0 | 1 | 2 | 3, microBatches: cfg.gradAccum });
    const t = new MeshTrainer(g, cfg, plan, world, data, tok.vocabSize, { bucketBytes: args.bucketBytes });
    const store = t.stages.params, { zero } = t.sync;
    const rows: number[][] | undefined = args.recordRows ? [] : undefined;
    if (rows) {
      // The first stage's embedding reads every micro-batch's host tokens: this rank's rows.
      const embed = t.stages.embed.bind(t.stages);
      t.stages.embed = (tape, host, b, tt) => (rows.push(Array.from(host)), embed(tape, host, b, tt));
    }
    const buckets = (zero?.buckets ?? t.sync.buckets ?? []).map((b) => b.end - b.start);
    const res: RunResult = {
      losses: [],
      gradNorms: [],
      sent: [],
      launched: [],
      order: [],
      buckets,
      params: null,
      flat: store.flatSize,
      shard: zero?.shards.shard ?? 0,
    };
    // The flat layout (alignment gaps zero) of a by-name map, as the single-rank reference reads it.
    const flat = (named: Map<string, Float32Array>) => {
      const out = new Float32Array(store.flatSize);
      for (const p of store.params) out.set(named.get(p.name)!, p.offset);
      return out;
    };
    for (let s = 0; s < cfg.steps; s++) {
      record(res, await t.step(s));
      if (s === 0) {
        const grads = flat(await t.gradients()); // ZeRO gathers: every rank calls it
        if (world.rank === 0) res.grads0 = grads;
      }
    }
    res.rows = rows;
    const params = flat(await t.parameters());
    if (world.rank === 0) res.params = params;
    if (zero) res.memory = t.memory() as ZeroMemory;
    t.destroy();
    return res;
  },
});

/** Appends one step's loss, norm, traffic and bucket launches to `res`. */
function record(res: RunResult, rec: MeshStepRecord): void {
  res.losses.push(rec.loss);
  res.gradNorms.push(rec.gradNorm);
  res.sent.push(rec.sent);
  res.launched.push(rec.overlap.launchedDuringBackward);
  res.order.push(rec.overlap.order);
}
