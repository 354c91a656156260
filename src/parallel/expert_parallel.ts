/**
 * Expert parallelism (GShard, Lepikhin et al. arXiv 2006.16668; Switch Transformer arXiv
 * 2101.03961; Megatron-LM `core/transformer/moe/token_dispatcher.py` MoEAlltoAllTokenDispatcher;
 * DeepSpeed-MoE's expert / expert-data-parallel groups, Rajbhandari et al. arXiv 2201.05596):
 * a world of dp data-parallel ranks, each training on its rows of the global batch, split into
 * dp/ep EP groups of ep consecutive ranks (plan.ts `planGroup(plan, 'ep', rank)`). Inside an EP
 * group the E experts of every MoE layer are spread E/ep per rank; the EP groups are replicas
 * of each other. Everything else is replicated as in data parallelism. Works for every
 * MoELanguageModel (gpt-moe, mamba-moe). Each MoE layer routes a rank's tokens as one group and
 * exchanges them over its EP group with two all-to-alls per pass (expert_exchange.ts).
 *
 * Gradients (matched to the single-rank mean loss over the global batch): dense parameters
 * (router included) are averaged over all dp ranks. An expert's gradient already sums the
 * tokens of its EP group (the backward all-to-all brought them); it is summed over the
 * expert-data-parallel group (the dp/ep ranks holding the same experts, `edp[…]`, skipped when
 * ep = dp) and divided by dp. The clip norm adds the EP group's expert sums of squares (one
 * allReduce of 1 element).
 *
 * Elements rank r sends per step (ring allReduces): Ψ_dense over dp, Ψ_expert (this rank's
 * experts) over dp/ep, 1 (loss) over dp, 1 (expert norm) over ep, and 4·L_moe·gradAccum
 * allToAlls of E·cap·C elements over ep, each sending (ep−1)/ep of them.
 */
import type { Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { Tape } from '../autograd/tape.ts';
import { RULES } from '../autograd/rules.ts';
import { axpy } from '../kernels/elementwise.ts';
import type { Communicator } from '../comm/communicator.ts';
import type { TextDataset } from '../data/dataset.ts';
import type { TrainConfig } from '../train/config.ts';
import { lrAt, scheduleFromConfig, type ScheduleSpec, validateSchedule } from '../train/schedules.ts';
import { expertOf, type ExpertShard } from '../models/moe_specs.ts';
import type { MoELanguageModel } from '../models/moe_layer.ts';
import { forwardExpertParallel } from './expert_exchange.ts';
import { checkDataParallel, type ParallelStepRecord, subGroup } from './data_parallel.ts';
import { TrafficMeter } from './traffic.ts';
import { type ParallelPlan, planGroup } from './plan.ts';
import { AdamW } from '../train/optimizer.ts';

/**
 * The experts rank `index` of an EP group of `ep` holds: [index·E/ep, (index+1)·E/ep).
 * @throws Error when ep does not divide E or index is outside 0 … ep−1.
 */
export function expertShard(nExpert: number, ep: number, index: number): ExpertShard {
  if (!Number.isInteger(ep) || ep < 1 || nExpert % ep) {
    throw new Error(`expert parallel: ep ${ep} must divide the ${nExpert} experts`);
  }
  if (!Number.isInteger(index) || index < 0 || index >= ep) {
    throw new Error(`expert parallel: rank index ${index} is outside 0 … ${ep - 1}`);
  }
  return { first: (index * nExpert) / ep, count: nExpert / ep };
}

/** The three groups of an expert-parallel rank (ids name their world ranks). */
export interface ExpertParallelGroups {
  /** Every data-parallel rank, `dp[…]`: dense gradients and the loss. */
  dp: Communicator;
  /** ep consecutive dp ranks, `ep[…]`: the all-to-alls and the expert norm. */
  ep: Communicator;
  /** The dp/ep ranks holding the same experts (same index in their EP groups), `edp[…]`: expert gradients. */
  edp: Communicator;
}

/**
 * The groups of `world.rank` under `plan` (plan.ts planGroup; DeepSpeed-MoE's layout).
 * @throws Error unless ep divides dp, pp = cp = tp = 1, zero = 0 and the world has dp ranks.
 */
export function expertParallelGroups(world: Communicator, plan: ParallelPlan): ExpertParallelGroups {
  const { dp, ep, pp, cp, tp, zero } = plan;
  if (!(ep >= 1 && dp % ep === 0) || pp !== 1 || cp !== 1 || tp !== 1 || zero !== 0 || world.size !== dp) {
    throw new Error(
      `expert parallel: supported plans are ep dividing dp on a world of dp ranks with pp = cp = tp = 1 and zero 0; got dp ${dp}, ep ${ep}, pp ${pp}, cp ${cp}, tp ${tp}, zero ${zero} on ${world.size} ranks`,
    );
  }
  const named = (kind: string, ranks: number[]) => world.newGroup(ranks, `${kind}[${ranks.join(',')}]`);
  const all = planGroup(plan, 'dp', world.rank), epRanks = planGroup(plan, 'ep', world.rank);
  const at = epRanks.indexOf(world.rank);
  return { dp: named('dp', all), ep: named('ep', epRanks), edp: named('edp', all.filter((_, d) => d % ep === at)) };
}

/**
 * One expert-parallel rank: its shard of the MoE model, its rows of every global batch, the two
 * all-to-alls per MoE layer and pass, the dense and expert gradient allReduces and AdamW with
 * the global clip norm. Every rank of the world constructs it with the same config and its
 * {@link expertParallelGroups}, and calls `step` in turn.
 */
export class ExpertParallelTrainer {
  readonly schedule: ScheduleSpec;
  private readonly rows: number;
  private readonly tokens: Tensor;
  private readonly targets: Tensor;
  private readonly lossAcc: Tensor;
  /** optimizer.ts's AdamW over every parameter this rank holds. */
  private readonly opt: AdamW;
  private readonly groups: {
    moe: Communicator;
    grads: Communicator;
    experts: Communicator;
    loss: Communicator;
    norm: Communicator;
  };
  private readonly meter: TrafficMeter;

  /**
   * @param model built with `expertShard(E, g.ep.size, g.ep.rank)` (every expert param present).
   * @throws Error when the batch does not split over the dp ranks, goldfish masking is on, or the shard does not match the rank.
   */
  constructor(
    readonly gpu: Gpu,
    readonly model: MoELanguageModel,
    readonly data: TextDataset,
    readonly cfg: TrainConfig,
    readonly g: ExpertParallelGroups,
  ) {
    checkDataParallel(cfg, g.dp.size);
    const want = expertShard(model.moe.nExpert, g.ep.size, g.ep.rank);
    if (model.shard.first !== want.first || model.shard.count !== want.count) {
      throw new Error(
        `expert parallel: EP rank ${g.ep.rank} of ${g.ep.size} must hold experts [${want.first}, ${
          want.first + want.count
        }), the model holds [${model.shard.first}, ${model.shard.first + model.shard.count})`,
      );
    }
    this.schedule = scheduleFromConfig(cfg);
    validateSchedule(this.schedule, cfg.steps);
    this.rows = cfg.batchSize / g.dp.size;
    this.tokens = gpu.zeros([this.rows, cfg.blockSize], 'i32', 'ep.tokens');
    this.targets = gpu.zeros([this.rows, cfg.blockSize], 'i32', 'ep.targets');
    this.lossAcc = gpu.zeros([2], 'f32', 'ep.loss');
    this.opt = new AdamW(gpu, cfg);
    this.groups = {
      moe: subGroup(g.ep, 'moe'),
      grads: subGroup(g.dp, 'grads'),
      experts: subGroup(g.edp, 'experts'),
      loss: subGroup(g.dp, 'scalars'),
      norm: subGroup(g.ep, 'norm'),
    };
    this.meter = TrafficMeter.of(g.dp);
  }

  /**
   * Runs optimizer step `step` (0-based). Resolves to the global mean loss (cross-entropy +
   * load-balancing term, as the single-rank Trainer reports), the global grad norm before
   * clipping and this rank's traffic (`overlap` is empty: gradients are synchronised after backward).
   * @throws (rejects with) a collective's error, e.g. a peer that timed out.
   */
  async step(step: number): Promise<ParallelStepRecord> {
    const { gpu, model, cfg } = this;
    const t = cfg.blockSize, b = this.rows, at = this.g.dp.rank * b * t;
    this.meter.take();
    model.params.zeroGrad();
    gpu.clear(this.lossAcc);
    for (let micro = 0; micro < cfg.gradAccum; micro++) {
      const batch = this.data.batch('train', cfg.batchSize, t, cfg.seed, step, micro);
      const x = batch.x.slice(at, at + b * t);
      gpu.write(this.tokens, x);
      gpu.write(this.targets, batch.y.slice(at, at + b * t));
      const tape = new Tape(gpu, model.params.gradMap());
      const { loss } = await forwardExpertParallel(model, tape, this.tokens, x, this.targets, b, t, this.groups.moe, {
        gradScale: 1 / cfg.gradAccum,
      });
      axpy(gpu, 1 / cfg.gradAccum, loss!, this.lossAcc);
      await tape.backwardAsync(RULES);
      tape.dispose();
    }
    const gradNorm = await this.syncAndUpdate(lrAt(this.schedule, step), step + 1);
    const local = (await gpu.read(this.lossAcc)).slice(0, 1) as Float32Array;
    const loss = (await this.groups.loss.allReduce(local, { op: 'avg' }))[0];
    return {
      step,
      lr: lrAt(this.schedule, step),
      loss,
      gradNorm,
      sent: this.meter.take(),
      overlap: { launchedDuringBackward: 0, order: [] },
    };
  }

  /** Averages dense gradients over dp, sums expert ones over the edp group and divides them by dp, clips by the global norm and runs AdamW. Returns ‖g‖₂. */
  private async syncAndUpdate(lr: number, t: number): Promise<number> {
    const { gpu, model } = this;
    const grads = Float32Array.from(await gpu.read(model.params.grads));
    // One allReduce per kind over its parameters packed without padding: Ψ_dense and Ψ_expert elements exactly.
    const allReduce = async (keep: (expert: boolean) => boolean, comm: Communicator, op: 'avg' | 'sum') => {
      const ps = model.params.params.filter((p) => keep(!!expertOf(p.name)));
      const packed = new Float32Array(ps.reduce((a, p) => a + p.size, 0));
      let at = 0;
      for (const p of ps) {
        packed.set(grads.subarray(p.offset, p.offset + p.size), at);
        at += p.size;
      }
      const out = comm.size > 1 ? await comm.allReduce(packed, { op }) : packed;
      at = 0;
      for (const p of ps) {
        grads.set(out.subarray(at, at + p.size), p.offset);
        at += p.size;
      }
      return out;
    };
    const dense = await allReduce((e) => !e, this.groups.grads, 'avg');
    await allReduce((e) => e, this.groups.experts, 'sum');
    let denseSq = 0, expertSq = 0;
    for (const v of dense) denseSq += v * v;
    const dp = this.g.dp.size;
    for (const p of model.params.params) {
      if (!expertOf(p.name)) continue;
      for (let i = p.offset; i < p.offset + p.size; i++) {
        grads[i] /= dp;
        expertSq += grads[i] * grads[i];
      }
    }
    const total = denseSq + (await this.groups.norm.allReduce(new Float32Array([expertSq]), { op: 'sum' }))[0];
    const norm = Math.sqrt(total);
    gpu.write(model.params.grads, grads);
    this.opt.stepSharded(model.params.params, lr, t, norm);
    return norm;
  }

  /** This rank's flat gradient after the last step's synchronisation (dense averaged, experts rescaled). */
  async gradients(): Promise<Float32Array> {
    return await this.gpu.read(this.model.params.grads) as Float32Array;
  }
}
