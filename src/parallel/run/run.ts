/**
 * Parallel training runs (docs/design.md#parallel-training): what every rank of a world does to train one
 * model under a {@link ParallelPlan} (the host side that drives a launched `World` is
 * run_host.ts). Runtime-neutral (browser and Deno module workers): no Deno APIs; the data
 * arrives as text or tokens.
 *
 * - One trainer (run_build.ts): every plan runs on MeshTrainer (mesh_trainer.ts) — data
 *   parallelism alone, any split by pp, cp, tp or ep, ZeRO-1/2/3 as its gradient-sync modes.
 *   The host checks the plan once (plan/rules.ts's table, src/perf/measure.ts checkRun) and ranks receive it
 *   checked: {@link RankRun.open} does not re-run the rules.
 * - Batch convention (as `npm run plan`): the global batch of one optimizer step is
 *   G = cfg.batchSize × cfg.gradAccum sequences, the rows the single-rank run of that G draws
 *   (data/dataset.ts: one global batch per step, however it is split), cut into plan.microBatches
 *   micro-batches of G/m (each split over dp): every trainer sees batchSize G/m with gradAccum m
 *   ({@link trainerConfig}), and reads the same rows as `--batch-size G` alone.
 * - Validation loss: world rank 0 evaluates it where it holds the whole model (dp, ZeRO-1/2, a
 *   mesh without tp and pp), at every evalInterval and the last step, on the fixed batches of
 *   Trainer.evaluate; under ZeRO-3 every rank gathers the layers for it (group `eval`, outside
 *   the step's accounting). Other sharded models (tp, pp, ep) report the training loss only.
 * - Accounting: every step record carries the elements the rank sent by `group/op` (traffic.ts)
 *   and by `dim/collective`; the summary carries the analytical prediction of cost.ts
 *   `stepTraffic` (with the trainer's real bucket sizes and `trainer: kind`, so its scalar
 *   collectives are included), and the bytes of parameters,
 *   gradients, optimizer state and the peak of the GPU buffer pool.
 * - Checkpoints: {@link RankRun.checkpoint} encodes the rank's state (rank_checkpoint.ts);
 *   `TrainRankArgs.resume` restores it and continues at its step.
 */
import type { Communicator } from '../../comm/communicator.ts';
import { Gpu } from '../../gpu/context.ts';
import type { Backend } from '../../gpu/device.ts';
import type { Tensor } from '../../gpu/tensor.ts';
import { CharTokenizer } from '../../data/tokenizer.ts';
import { TextDataset } from '../../data/dataset.ts';
import { parseConfig, type TrainConfig } from '../../train/config.ts';
import { meanLoss } from '../../train/evaluate.ts';
import { type ParallelPlan, planWorldSize, type StrategyKind } from '../plan/plan.ts';
import type { CommRow } from '../cost/cost.ts';
import type { Sent } from '../mesh/traffic.ts';
import type { RankRouting } from '../expert/moe_routing.ts';
import { buildTrainer, type Built } from './run_build.ts';
import type { PriceActions } from '../mesh/sim_compute.ts';
import { decodeRankState, encodeRankState, restoreRankState } from './rank_checkpoint.ts';
import { StepStop } from './step_stop.ts';

export { type StrategyKind } from '../plan/plan.ts';
export { strategyOf } from '../plan/strategy.ts';
export { planModelOf } from './plan_model.ts';
export { dimOfKey, sentByDim } from '../cost/rank_traffic.ts';
import { sentByDim } from '../cost/rank_traffic.ts';
import { derivedTraffic } from '../cost/derived_rows.ts';
/** The corpus: text (char tokenizer built from it) or tokens already encoded on the host. */
export type RunData = { text: string } | { tokens: Int32Array; vocabSize: number };

/** What every rank receives to start (structured-cloneable). */
export interface TrainRankArgs {
  plan: ParallelPlan;
  /** The run's config (global batch = batchSize × gradAccum, see the module doc). */
  cfg: Partial<TrainConfig>;
  data: RunData;
  /** WebGPU implementation of the rank's own device (default 'auto': wgpu in Deno, navigator.gpu in a page). */
  backend?: Backend;
  /** Dawn only: the adapter this rank opens, by name or index (gpu/dawn_adapters.ts); the MPI transport's per-process GPU. */
  adapter?: string;
  /** DP / ZeRO gradient bucket size (see DataParallelOptions). */
  bucketBytes?: number | 'layer';
  /** This rank's checkpoint file (rank_checkpoint.ts) to continue from. */
  resume?: Uint8Array;
  /** The host's stop request (step_stop.ts): `trainSteps` ends its batch early at an agreed step. */
  stop?: SharedArrayBuffer;
}

/** One optimizer step as one rank saw it. */
export interface RankStepRecord {
  step: number;
  /** Global mean training loss (equal on every rank). */
  loss: number;
  lr: number;
  /** Global gradient norm before clipping. */
  gradNorm: number;
  /** Wall-clock ms of the step on this rank. */
  ms: number;
  /** Simulated µs the step moved this rank's clock (comm/network.ts: messages priced by --net; 0 without it). */
  simUs: number;
  tokensPerSec: number;
  /** Elements sent, keyed `group/op` (traffic.ts). */
  sent: Sent;
  /** The same, keyed `dim/collective` as cost.ts `trafficByKind`. */
  byDim: Record<string, number>;
  /** f16-mixed: the loss scale this step's backward used, and whether its update was skipped (overflow). */
  lossScale?: number;
  skipped?: boolean;
  /** Validation loss (world rank 0 of a replicated model, at eval steps only). */
  valLoss?: number;
  /** A MoE model routed in several token groups: this rank's group's demand (moe_routing.ts). */
  routing?: RankRouting;
}

/** Bytes one rank keeps (fp32): ParamStore buffers (ZeRO: what its stage must keep) and the pool's peak. */
export interface RankMemory {
  params: number;
  grads: number;
  optimizer: number;
  /** Peak bytes of the GPU buffer pool (activations, temporaries) over the run. */
  peakPool: number;
  /** Parameter elements this rank holds (without alignment padding). */
  paramElements: number;
}

/** What a rank reports at the end of a run. */
export interface RankSummary {
  rank: number;
  kind: StrategyKind;
  memory: RankMemory;
  /**
   * Predicted traffic of one step: this rank's step counted from its model (cost/derived_rows.ts derivedTraffic);
   * recurrent depth's, whose r is drawn per step, of the last step run.
   */
  predicted: CommRow[];
  /** Steps run by {@link trainRank} (empty from the streaming tasks, whose steps went out earlier). */
  records: RankStepRecord[];
}

/** The config a rank's trainer runs with (see the module doc's batch convention). */
export function trainerConfig(plan: ParallelPlan, cfg: TrainConfig): TrainConfig {
  const g = cfg.batchSize * cfg.gradAccum, m = plan.microBatches;
  return parseConfig({ ...cfg, batchSize: g / m, gradAccum: m });
}

/** Token ids and vocabulary of the run's data (a char tokenizer over the text when given text). */
function encoded(d: RunData): { tokens: Int32Array; vocabSize: number } {
  if (!('text' in d)) return d;
  const tok = CharTokenizer.fromText(d.text);
  return { tokens: tok.encode(d.text), vocabSize: tok.vocabSize };
}

/** One rank's run: its device, trainer and accounting, stepped by {@link RankRun.step}. */
export class RankRun {
  next = 0;
  /** Shared stop request, when the host gave one. */
  stop: StepStop | null = null;
  /** Why the run can no longer step (a probe step moved its state past the saved one, run_save.ts), or null. */
  ended: string | null = null;
  private constructor(
    readonly world: Communicator,
    readonly gpu: Gpu,
    readonly kind: StrategyKind,
    readonly plan: ParallelPlan,
    readonly cfg: TrainConfig,
    readonly data: TextDataset,
    readonly built: Built,
    /** The traffic predicted for step s (derived_rows.ts derivedTraffic: this rank's model counted over the meta GPU). */
    readonly predictedAt: (step?: number) => Promise<CommRow[]>,
  ) {}

  /**
   * Opens this rank's device and builds its shard and trainer for a plan the host has checked (plan/rules.ts).
   * @param priceActions the simulated clock's compute prices (src/perf/action_prices.ts), needed
   *   under a network model with a peak.
   * @throws Error for an invalid config or checkpoint, or a world of another size than the plan's.
   */
  static async open(world: Communicator, args: TrainRankArgs, priceActions?: PriceActions): Promise<RankRun> {
    const runCfg = parseConfig(args.cfg);
    const { tokens, vocabSize } = encoded(args.data);
    if (world.size !== planWorldSize(args.plan)) {
      throw new Error(
        `rank ${world.transport.rank}: world size ${world.size} ≠ the plan's ${planWorldSize(args.plan)} ranks`,
      );
    }
    const kind: StrategyKind = 'mesh', cfg = trainerConfig(args.plan, runCfg);
    const data = new TextDataset(tokens, cfg.blockSize, cfg.valFraction, 'training data');
    const gpu = await Gpu.create({ backend: args.backend ?? 'auto', adapter: args.adapter });
    try {
      const built = buildTrainer(gpu, world, args.plan, cfg, data, vocabSize, args.bucketBytes, priceActions);
      const rank = world.transport.rank;
      const predicted = (step?: number) =>
        derivedTraffic(cfg, args.plan, vocabSize, rank, {
          step,
          bucketBytes: args.bucketBytes,
          shaders: gpu.shaders,
        });
      const run = new RankRun(world, gpu, kind, args.plan, cfg, data, built, predicted);
      if (args.resume) {
        const what = `rank ${rank}'s checkpoint`;
        const loaded = await decodeRankState(args.resume, what);
        if (loaded.meta.lossScale) built.scaler?.load(loaded.meta.lossScale);
        run.next = restoreRankState(gpu, run.state(), loaded, {
          plan: args.plan,
          rank,
          worldSize: world.size,
          kind,
        }, what);
        if (run.next > cfg.steps) {
          throw new Error(`${what} is at step ${run.next}, past this run's ${cfg.steps} steps; pass a larger --steps`);
        }
      }
      if (args.stop) run.stop = new StepStop(args.stop);
      gpu.pool.resetPeak();
      return run;
    } catch (e) {
      gpu.destroy();
      throw e;
    }
  }

  /** The tensors a checkpoint of this rank holds. */
  state(): Record<string, Tensor> {
    return this.built.state();
  }

  /** This rank's checkpoint file after {@link next} steps (rank_checkpoint.ts). */
  async checkpoint(): Promise<Uint8Array> {
    await this.built.settle?.();
    const rank = this.world.transport.rank;
    return await encodeRankState(this.gpu, this.state(), {
      plan: this.plan,
      config: { ...this.cfg },
      rank,
      worldSize: this.world.size,
      step: this.next,
      kind: this.kind,
      lossScale: this.built.scaler?.state(),
    });
  }

  /** Runs the next optimizer step (and rank 0's validation when due). */
  async step(): Promise<RankStepRecord> {
    if (this.ended) throw new Error(`rank ${this.world.transport.rank}: the run cannot step any more: ${this.ended}`);
    const s = this.next++, t0 = performance.now(), clock = this.world.tracer.clock, sim0 = clock.now;
    const r = await this.world.tracer.span(`step ${s}`, () => this.built.step(s), { sim: false, step: s });
    const ms = performance.now() - t0;
    const byDim = sentByDim(r.sent);
    const tokens = this.cfg.batchSize * this.cfg.gradAccum * this.cfg.blockSize;
    const rec: RankStepRecord = {
      step: s,
      loss: r.loss,
      lr: r.lr,
      gradNorm: r.gradNorm,
      ms,
      simUs: clock.now - sim0,
      tokensPerSec: (tokens * 1000) / ms,
      sent: r.sent,
      byDim,
      ...(r.lossScale === undefined ? {} : { lossScale: r.lossScale, skipped: r.skipped }),
      ...(r.routing ? { routing: r.routing } : {}),
    };
    const due = (s + 1) % this.cfg.evalInterval === 0 || s + 1 === this.cfg.steps;
    const rank0 = this.world.transport.rank === 0;
    if (due && this.built.evaluate) {
      const v = await this.built.evaluate();
      if (rank0) rec.valLoss = v;
    } else if (due && this.built.evalModel && rank0) {
      rec.valLoss = await meanLoss(this.gpu, this.built.evalModel, this.data, this.cfg);
    }
    return rec;
  }

  /** This rank's accounting: its memory, measured, and one step's traffic predicted from the model (the last step run). */
  async summary(records: RankStepRecord[] = []): Promise<RankSummary> {
    const p = this.built.params, own = this.built.memory;
    return {
      rank: this.world.transport.rank,
      kind: this.kind,
      memory: { ...own, peakPool: this.gpu.pool.stats.peakBytes, paramElements: p.count },
      predicted: await this.predictedAt(this.next > 0 ? this.next - 1 : undefined),
      records,
    };
  }

  /** Frees the model and the device, after the queued work (the last update) has finished: wgpu panics on destroyed buffers in flight. */
  async close(): Promise<void> {
    await this.gpu.sync();
    this.built.dispose();
    this.gpu.destroy();
  }
}
