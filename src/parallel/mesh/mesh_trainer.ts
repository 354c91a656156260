/**
 * One trainer over the whole [dp, pp, cp, tp] DeviceMesh (docs/design.md#parallel-training): the trainer
 * of every split model (tp, pp or cp alone as well as combined), composing the strategies the
 * way Megatron-LM and picotron compose them (Narayanan et al., arXiv 2104.04473, "PTD-P"):
 *
 * API (the CLI and workers code against it; fields may be added, none removed): `new
 * MeshTrainer(gpu, cfg, plan, world, data, vocabSize, { bucketBytes?, priceActions? })`; `await t.step(s)` on
 * every rank, the same steps in order → MeshStepRecord (global loss, gradNorm, lr; this rank's
 * `sent` and `timeline`); `gradients()` / `parameters()` (collective over dp·cp under ZeRO),
 * `memory()`, `trainingState()`, `coords`, `groups`, `positions`, `describe()`, `destroy()`;
 * `checkMeshPlan(plan, cfg, vocabSize, worldSize)` is the host's check of what it accepts; the constructor does not re-check.
 *   The batch is the single-rank Trainer's: cfg.gradAccum = plan.microBatches micro-batches of
 *   cfg.batchSize sequences each (the global batch G of one step is their product), micro-batch j
 *   rows [j·B, (j+1)·B) of the step's one global batch (data/dataset.ts), so a plan reproduces the
 *   single-rank run with the same global batch however either splits it (run.ts trainerConfig);
 *   goldfish / NEFTune off. Weights start from cfg.seed exactly as the single-rank model's.
 *   `sent` keys are `group/op` (traffic.ts); per-rank formulas in tests/parallel/mesh_harness.ts.
 *
 * Composition per rank, strategy by strategy: docs/design.md#composition-per-rank; its order in code: parallelize.ts.
 * Refused up front on the host (plan/rules.ts's table): ep on a dense architecture, ring attention under mixed precision.
 */
import { MOE_ARCHS } from '../../models/archs.ts';
import { autocastOf, checkPrecision } from '../../autograd/autocast.ts';
import { type LossScaler, lossScalerFor } from '../../train/loss_scale.ts';
import type { Gpu } from '../../gpu/context.ts';
import type { Tensor } from '../../gpu/tensor.ts';
import type { Communicator } from '../../comm/communicator.ts';
import type { MeshCoords } from '../../comm/mesh.ts';
import type { RankGroups } from './rank_model.ts';
import { wallMs } from '../../comm/trace.ts';
import type { TextDataset } from '../../data/dataset.ts';
import type { TrainConfig } from '../../train/config.ts';
import { lrAt, scheduleFromConfig, type ScheduleSpec, validateSchedule } from '../../train/schedules.ts';
import type { StepRecord } from '../../train/trainer.ts';
import type { PipelineExecutor } from '../pipeline/pipeline_executor.ts';
import type { OverlapStats } from '../data/buckets.ts';
import type { PipelineSchedule } from '../pipeline/pipeline_schedule.ts';
import type { Span } from '../pipeline/pipeline_sim.ts';
import { describePlan, type ParallelPlan } from '../plan/plan.ts';
import { checkTrainerBatch, pipelineProgram } from '../plan/mesh_plan.ts';

export { checkMeshPlan } from '../plan/mesh_plan.ts';
import { subGroup } from '../data/data_parallel.ts';
import { microBatchRows } from '../../data/dataset.ts';
import { parallelize } from './parallelize.ts';
import { addSent, type Sent, TrafficMeter } from './traffic.ts';
import type { ModelStages } from '../pipeline/stages.ts';
import { takePositions } from '../context/context_parallel.ts';
import { MeshEval } from './mesh_eval.ts';
import type { GradSync } from '../data/grad_sync.ts';
import type { OuterSync } from '../data/outer_sync.ts';
import { type ActionUs, type PriceActions, stepRecorder } from './sim_compute.ts';
import { AdamW } from '../../train/optimizer.ts';
import { withTrainDepth } from '../../models/recurrence.ts';
import { type RankRouting, type RoutingLog, routingLogOf } from '../expert/moe_routing.ts';

/** One optimizer step as a mesh rank saw it; `loss`, `gradNorm` and `lr` are global. */
export interface MeshStepRecord extends StepRecord {
  /** Elements this rank sent during the step, keyed `group/op` (traffic.ts), e.g. `tp[0,1]/act/allReduce`. */
  sent: Sent;
  /** This rank's compute / comm / idle spans, ms from `origin`, in time order. */
  timeline: Span[];
  /** Wall clock (epoch ms, src/comm/trace.ts wallMs) of the step's start, to line ranks' timelines up. */
  origin: number;
  /** Data-parallel buckets launched during the last backward (empty without buckets). */
  overlap: OverlapStats;
  /** A MoE model routing each micro-batch in several token groups: this rank's group's demand (moe_routing.ts). */
  routing?: RankRouting;
}

/** The per-rank trainer of a dp × pp × cp × tp (+ sp) × ep × ZeRO plan (see the module doc). */
export class MeshTrainer {
  readonly schedule: ScheduleSpec;
  readonly program: PipelineSchedule;
  readonly stages: ModelStages;
  /** This rank's mesh coordinates. */
  readonly coords: MeshCoords;
  /**
   * World ranks of this rank's group along each mesh dimension, its gradient-sync group
   * `dpcp` (the dp·cp ranks holding the same shard, dp-major) and its embedding group ([] when none).
   */
  readonly groups: RankGroups;
  /** Global positions of this rank's T/cp tokens of every sequence (0…T−1 without cp). */
  readonly positions: Int32Array;
  /** Rows per micro-batch, b = B / (dp·m). */
  readonly rows: number;
  private readonly exec: PipelineExecutor;
  /** The gradient-sync hook: sp partials, the tied embedding, the dp·cp average, DDP's buckets or ZeRO. */
  readonly sync: GradSync;
  private readonly scalars: Communicator;
  private readonly meter: TrafficMeter;
  private readonly lossAcc: Tensor;
  /** optimizer.ts's AdamW over what this rank owns (its shard, or its ZeRO pieces). */
  private readonly opt: AdamW;
  /** f16-mixed: the dynamic loss scaler (train/loss_scale.ts), the same on every rank; else null. */
  readonly scaler: LossScaler | null;
  /** µs each forward / backward adds to the simulated clock under a modelled peak (sim_compute.ts), else null. */
  private readonly simUs: ActionUs | null;
  /** The low-communication outer loop (outer_sync.ts) when the plan has --sync other than ddp, else null. */
  readonly outer: OuterSync | null;
  /** Validation of a split model over the ranks (mesh_eval.ts); null under ep or ZeRO-3, which it does not cover. */
  readonly validation: MeshEval | null;
  /** The step's routing of this rank's token group when the split routes in several (moe_routing.ts), else null. */
  private readonly routing: RoutingLog | null;

  /**
   * @param world the world communicator (size dp·pp·cp·tp); every rank constructs the trainer
   *   with the same config, plan and data and calls {@link step} with the same steps.
   * @param opts `priceActions`: the compute prices of the simulated clock (sim_compute.ts), needed
   *   when the network model has a peak.
   * `plan` is one the host checked (mesh_plan.ts checkMeshPlan); only the trainer's own batch invariant is asserted.
   * @throws Error for gradAccum ≠ the plan's micro-batches, from the LR schedule check, or for a peak without `priceActions`.
   */
  constructor(
    readonly gpu: Gpu,
    readonly cfg: TrainConfig,
    readonly plan: ParallelPlan,
    world: Communicator,
    readonly data: TextDataset,
    vocabSize: number,
    opts: { bucketBytes?: number | 'layer'; priceActions?: PriceActions } = {},
  ) {
    checkTrainerBatch(plan, cfg);
    this.program = pipelineProgram(plan);
    this.schedule = scheduleFromConfig(cfg);
    validateSchedule(this.schedule, cfg.steps);
    this.rows = cfg.batchSize / plan.dp;
    // The order of tp, sp, cp, pp and dp / ZeRO, in one place (parallelize.ts).
    const p = parallelize(gpu, cfg, plan, world, vocabSize, this.program, this.rows, opts.bucketBytes), rm = p.model;
    ({ coords: this.coords, groups: this.groups, positions: this.positions, stages: this.stages } = rm);
    ({ exec: this.exec, sync: this.sync, outer: this.outer } = p);
    const T = cfg.blockSize;
    this.exec.autocast = autocastOf(cfg.precision);
    checkPrecision(gpu, cfg.precision);
    this.scaler = lossScalerFor(cfg);
    const peak = world.transport.clock.net?.spec.peakGflops, price = opts.priceActions;
    if (peak && !price) {
      throw new Error(
        `the network model's peak=${peak} GFLOP/s charges compute, which needs opts.priceActions (src/perf/action_prices.ts)`,
      );
    }
    this.simUs = peak && price ? price(cfg, plan, vocabSize, peak) : null;
    this.scalars = subGroup(world, 'scalars');
    this.meter = TrafficMeter.of(world);
    this.lossAcc = gpu.zeros([2], 'f32', 'mesh.loss');
    this.opt = new AdamW(gpu, cfg);
    this.routing = routingLogOf(gpu, this.stages.model, plan, this.coords, this.rows, T / plan.cp);
    const { stages, rows, positions, coords } = this, tokensOf = (a: Int32Array) => this.tokensOf(a);
    this.validation = plan.ep > 1 || plan.zero === 3 ? null : new MeshEval(
      { gpu, cfg, data, stages, rows, positions, coords, dp: plan.dp, dpcp: plan.dp * plan.cp, tokensOf },
      rm.comm('pp'),
      world,
      this.program.v,
    );
  }

  /**
   * Runs optimizer step `step` (0-based): the schedule over this dp rank's rows, the gradient
   * synchronisation (sp partials over tp, wte over the embedding group, everything averaged
   * over dp), the global clip and AdamW. Resolves to global loss / norm and this rank's traffic.
   * @throws (rejects with) a peer's failure or timeout, or a schedule action out of order.
   */
  async step(step: number): Promise<MeshStepRecord> {
    const { gpu, cfg, plan } = this;
    // Messages between steps (validation's) are no step's, except an outer allReduce's still in flight.
    const between = this.meter.take(), carried = this.outer?.ownTraffic(between) ?? {};
    const t0 = wallMs(), timeline: Span[] = [];
    const span = stepRecorder(timeline, t0, this.sync.dpGroup.transport.clock, this.simUs, plan.pp * this.program.v);
    await this.sync.startStep();
    gpu.clear(this.lossAcc);
    // Each rank's loss is the mean over its 1/(dp·cp) of the tokens, so its loss gradient is dp·cp times the
    // single-rank one: seeding S/(dp·cp) gives the f16 casts the single-rank values, and the same overflows.
    const scale = this.scaler?.scale ?? 1;
    const seed = this.exec.lossScale = this.scaler ? scale / (plan.dp * plan.cp) : 1;
    // This dp replica's rows of micro-batch j of the step's one global batch (data/dataset.ts
    // microBatchRows), then this cp rank's tokens of each row; the executor reads micro-batch j at rows [j·b, (j+1)·b).
    const m = plan.microBatches, n = this.rows * this.positions.length;
    const x = new Int32Array(m * n), y = new Int32Array(m * n);
    for (let j = 0; j < m; j++) {
      const { from, to } = microBatchRows(j, cfg.batchSize, this.coords.dp, plan.dp);
      const batch = this.data.rows('train', cfg.blockSize, cfg.seed, step, from, to);
      x.set(this.tokensOf(batch.x), j * n);
      y.set(this.tokensOf(batch.y), j * n);
    }
    // Every rank draws the same r from (seed, step): a recurrent-depth model's stages agree (models/recurrence.ts).
    const run = () => this.exec.run(x, y, this.lossAcc, span, this.sync.hooks(m));
    this.routing?.start();
    await withTrainDepth(this.stages.model, cfg, step, run);
    const routing = await this.routing?.finish();

    let start = wallMs();
    const squares = await this.sync.run();
    span('comm', start, 'gradient sync');

    start = wallMs();
    // [‖g‖² share, loss share]; with --sync each dp worker clips by its own norm: [‖g‖² per worker…, loss share].
    const w = plan.sync ? plan.dp : 1, shares = new Float32Array(w + 1), mine = plan.sync ? this.coords.dp : 0;
    [shares[mine], shares[w]] = [squares, await this.lossShare()];
    const sums = await this.scalars.allReduce(shares, { op: 'sum' });
    // Under f16-mixed the gradients hold the loss scale; a non-finite sum reaches every rank, so all skip alike.
    const norm = Math.fround(Math.sqrt(sums[mine]) / seed);
    span('comm', start, 'norm + loss allReduce');
    start = wallMs();
    const lr = lrAt(this.schedule, step);
    const apply = this.scaler ? this.scaler.update(Number.isFinite(norm)) : true;
    if (apply) this.opt.stepSharded(this.sync.owned(), lr, step + 1, norm, 1 / seed);
    await gpu.sync();
    span('compute', start, 'AdamW');
    start = wallMs();
    if (await this.outer?.afterStep(step)) span('comm', start, `outer sync (${plan.sync!.method})`);
    start = wallMs();
    if (await this.sync.finish()) span('comm', start, `ZeRO-${plan.zero} parameter all-gather`);
    const overlap = this.sync.overlap;
    const scaled = this.scaler ? { lossScale: scale, skipped: !apply } : {};
    return {
      step,
      lr,
      loss: sums[w],
      gradNorm: norm,
      sent: addSent(this.meter.take(), carried),
      timeline,
      origin: t0,
      overlap,
      ...scaled,
      ...(routing ? { routing } : {}),
    };
  }

  /**
   * loss/(dp·cp) on tp index 0: the last stage's lossAcc holds the mean over this rank's tokens, every stage's its
   * MoE layers' load-balancing terms. A MoE model under sp: loss/(dp·cp·tp) on every tp rank, each term its own
   * (docs/design.md#the-moe-models-under-sequence-parallelism).
   */
  private async lossShare(): Promise<number> {
    const tpShare = this.plan.sp && MOE_ARCHS.includes(this.cfg.arch) ? this.plan.tp : 0;
    if (this.coords.tp !== 0 && !tpShare) return 0;
    return (await this.gpu.read(this.lossAcc))[0] / (this.plan.dp * this.plan.cp * Math.max(1, tpShare));
  }

  /**
   * This rank's shard of every gradient it holds (the last step's, synchronised, before
   * clipping), by name. Under ZeRO the reduced pieces are gathered over the dp·cp group, so
   * every rank of it must call this.
   */
  async gradients(): Promise<Map<string, Float32Array>> {
    const { zero } = this.sync;
    return this.byName(zero ? await zero.gradients() : await this.gpu.read(this.stages.params.grads) as Float32Array);
  }

  /** This rank's shard of every parameter it holds, by name (ZeRO-3 gathers them: every rank of the dp·cp group calls it). */
  async parameters(): Promise<Map<string, Float32Array>> {
    const { zero } = this.sync;
    return this.byName(zero ? await zero.values() : await this.gpu.read(this.stages.params.values) as Float32Array);
  }

  /** Model-state bytes this rank holds (fp32): its ParamStore's flat buffers, or what its ZeRO stage keeps. */
  memory(): { params: number; grads: number; optimizer: number } {
    if (this.sync.zero) return this.sync.zero.memory();
    const flat = this.stages.params.flatSize * 4;
    return { params: flat, grads: flat, optimizer: 2 * flat };
  }

  /** What a checkpoint of this rank holds: the store's values and AdamW moments, or ZeRO's remaining buffers and pieces. */
  trainingState(): Record<string, Tensor> {
    const own = this.sync.zero?.trainingState() ?? this.stages.params.trainingState();
    return { ...own, ...this.sync.compressionState(), ...this.outer?.state() };
  }

  /** One line describing the plan and this rank's place in it. */
  describe(): string {
    const c = this.coords;
    return `${describePlan(this.plan)}; this rank at dp ${c.dp} · pp ${c.pp} · cp ${c.cp} · tp ${c.tp}`;
  }

  /** This rank's cp tokens of each of its dp replica's b rows (b, T) → (b, T/cp). */
  private tokensOf(a: Int32Array): Int32Array {
    return takePositions(a, this.rows, this.cfg.blockSize, this.positions);
  }

  private byName(all: Float32Array): Map<string, Float32Array> {
    return new Map(this.stages.params.params.map((p) => [p.name, all.slice(p.offset, p.offset + p.size)]));
  }

  /** Frees the parameters and step buffers. */
  destroy(): void {
    this.sync.zero?.destroy();
    this.stages.params.destroy();
    this.lossAcc.release();
    this.validation?.release();
    this.opt.dispose();
    this.outer?.dispose();
  }
}
