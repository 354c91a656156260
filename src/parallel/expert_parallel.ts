/**
 * Expert parallelism (GShard, Lepikhin et al. arXiv 2006.16668; Switch Transformer arXiv
 * 2101.03961; Megatron-LM `core/transformer/moe/token_dispatcher.py` MoEAlltoAllTokenDispatcher;
 * DeepSpeed-MoE's expert / expert-data-parallel groups, Rajbhandari et al. arXiv 2201.05596):
 * a world of dp data-parallel ranks, each training on its rows of the global batch, split into
 * dp/ep EP groups of ep consecutive ranks (plan.ts `planGroup(plan, 'ep', rank)`). Inside an EP
 * group the E experts of every MoE layer are spread E/ep per rank; the EP groups are replicas
 * of each other. Everything else is replicated as in data parallelism. Works for every
 * MoELanguageModel (gpt-moe, mamba-moe).
 *
 * One MoE layer on rank r:
 * 1. route its own N = b·T tokens as one group (kernels/moe.ts) and gather them into
 *    capacity-padded slots (E, cap, C) — GShard's fixed-size dispatch buffer, so every
 *    all-to-all chunk has the same size and no counts are exchanged first;
 * 2. allToAll over the EP group: the chunk of experts [d·E/ep, (d+1)·E/ep) goes to EP index d,
 *    which receives (E/ep, ep·cap, C): for each local expert, cap rows from every source in order;
 * 3. apply the local experts;
 * 4. the inverse allToAll brings every slot's output home, where it is combined with the gates.
 * Backward runs the same two allToAlls on the gradients in reverse (collectiveOp pairs).
 *
 * Routing each rank's tokens as one group equals the single-rank model with `groups = dp`
 * (moe_layer.ts): same capacities, drops and load-balancing loss, so the losses match.
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
import { collectiveOp } from '../autograd/collective.ts';
import { axpy } from '../kernels/elementwise.ts';
import { adamwUpdate, packAdamHyper } from '../kernels/adamw.ts';
import type { Communicator } from '../comm/communicator.ts';
import type { TextDataset } from '../data/dataset.ts';
import type { TrainConfig } from '../train/config.ts';
import { lrAt, scheduleFromConfig, type ScheduleSpec, validateSchedule } from '../train/schedules.ts';
import type { ForwardOptions, ForwardResult } from '../models/model.ts';
import { expertOf, type ExpertShard, type MoECall, type MoELanguageModel } from '../models/moe_layer.ts';
import { checkDataParallel, type ParallelStepRecord, subGroup } from './data_parallel.ts';
import { TrafficMeter } from './traffic.ts';
import { type ParallelPlan, planGroup } from './plan.ts';
import { clipScale } from '../train/optimizer.ts';

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

/** Layout of one exchange: E experts, ep ranks, cap slots per expert and rank, width C; rows of the local (R1) and expert-side (Rep) blocks. */
export interface ExchangeGeometry {
  e: number;
  ep: number;
  cap: number;
  c: number;
  localRows: number;
  expertRows: number;
}

/**
 * (E, localRows, C) slot rows of this rank → (E/ep, expertRows, C) rows of its experts, row
 * l·expertRows + s·cap + i holding source rank s's slot i of local expert l (padding rows 0).
 */
export async function allToAllToExperts(
  comm: Communicator,
  x: Float32Array,
  g: ExchangeGeometry,
): Promise<Float32Array> {
  const { e, ep, cap, c, localRows, expertRows } = g, el = e / ep, row = cap * c;
  const send = new Float32Array(e * row);
  for (let x0 = 0; x0 < e; x0++) send.set(x.subarray(x0 * localRows * c, x0 * localRows * c + row), x0 * row);
  const recv = await comm.allToAll(send);
  const out = new Float32Array(el * expertRows * c);
  for (let s = 0; s < ep; s++) {
    for (let l = 0; l < el; l++) {
      out.set(recv.subarray((s * el + l) * row, (s * el + l + 1) * row), (l * expertRows + s * cap) * c);
    }
  }
  return out;
}

/** The inverse of {@link allToAllToExperts}: expert outputs (E/ep, expertRows, C) back to the ranks their tokens came from, (E, localRows, C). */
export async function allToAllFromExperts(
  comm: Communicator,
  y: Float32Array,
  g: ExchangeGeometry,
): Promise<Float32Array> {
  const { e, ep, cap, c, localRows, expertRows } = g, el = e / ep, row = cap * c;
  const send = new Float32Array(e * row);
  for (let s = 0; s < ep; s++) {
    for (let l = 0; l < el; l++) {
      send.set(y.subarray((l * expertRows + s * cap) * c, (l * expertRows + s * cap) * c + row), (s * el + l) * row);
    }
  }
  const recv = await comm.allToAll(send);
  const out = new Float32Array(e * localRows * c);
  for (let x0 = 0; x0 < e; x0++) out.set(recv.subarray(x0 * row, (x0 + 1) * row), x0 * localRows * c);
  return out;
}

/** Dispatch as an autograd function: forward {@link allToAllToExperts}, backward its inverse. */
export function dispatchToExperts(tape: Tape, xe: Tensor, comm: Communicator, g: ExchangeGeometry): Promise<Tensor> {
  return collectiveOp(
    tape,
    xe,
    [(g.e / g.ep) * g.expertRows, g.c],
    'moe.dispatch.allToAll',
    (x) => allToAllToExperts(comm, x, g),
    (dy) => allToAllFromExperts(comm, dy, g),
  );
}

/** Combine's exchange as an autograd function: forward {@link allToAllFromExperts}, backward {@link allToAllToExperts}. */
export function combineFromExperts(tape: Tape, ye: Tensor, comm: Communicator, g: ExchangeGeometry): Promise<Tensor> {
  return collectiveOp(
    tape,
    ye,
    [g.e * g.localRows, g.c],
    'moe.combine.allToAll',
    (y) => allToAllFromExperts(comm, y, g),
    (dx) => allToAllToExperts(comm, dx, g),
  );
}

/** One MoE MLP across the EP group `comm` (model holds this rank's shard of the experts). */
export async function moeExpertParallel(
  tape: Tape,
  model: MoELanguageModel,
  call: MoECall,
  comm: Communicator,
): Promise<Tensor> {
  const layers = model.moeLayers;
  const { routing, xe } = layers.route(tape, call.x, call.layer, 1);
  const ep = comm.size, { e, capacity: cap, rows: localRows } = routing.plan, c = layers.c;
  const align = Math.max(64, model.gpu.device.limits.minStorageBufferOffsetAlignment / 4);
  let expertRows = ep * cap;
  while ((expertRows * c) % align) expertRows++;
  const g: ExchangeGeometry = { e, ep, cap, c, localRows, expertRows };
  const xr = await dispatchToExperts(tape, xe, comm, g);
  const yr = layers.experts(tape, xr, call.layer, expertRows);
  const ye = await combineFromExperts(tape, yr, comm, g);
  return layers.combine(tape, ye, routing, call.layer);
}

/**
 * The model's forward with every MoE MLP run across the EP group `comm` (see {@link MoELanguageModel.steps}).
 * @throws Error when the group size differs from the model's shard (E / count).
 */
export async function forwardExpertParallel(
  model: MoELanguageModel,
  tape: Tape,
  tokens: Tensor,
  hostTokens: Int32Array,
  targets: Tensor | null,
  b: number,
  t: number,
  comm: Communicator,
  opts: ForwardOptions = {},
): Promise<ForwardResult> {
  if (model.shard.count * comm.size !== model.moe.nExpert) {
    throw new Error(
      `expert parallel: a group of ${comm.size} ranks needs ${
        model.moe.nExpert / comm.size
      } experts per rank, the model holds ${model.shard.count}`,
    );
  }
  return await model.steps(
    tape,
    tokens,
    hostTokens,
    targets,
    b,
    t,
    opts,
    (call) => moeExpertParallel(tape, model, call, comm),
  );
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
  private readonly norm: Tensor;
  private readonly hyper: Tensor;
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
    this.norm = gpu.zeros([2], 'f32', 'ep.norm');
    this.hyper = gpu.zeros([8], 'f32', 'ep.hyper');
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
    const { gpu, model, cfg } = this;
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
    const scale = clipScale(norm, cfg.gradClip);
    gpu.write(model.params.grads, grads);
    gpu.write(this.norm, new Float32Array([norm, scale]));
    gpu.write(this.hyper, packAdamHyper({ lr, beta1: cfg.beta1, beta2: cfg.beta2, eps: cfg.eps, step: t }));
    for (const p of model.params.params) {
      adamwUpdate(gpu, p.value, p.grad, p.m, p.v, this.hyper, this.norm, p.decay ? cfg.weightDecay : 0);
    }
    return norm;
  }

  /** This rank's flat gradient after the last step's synchronisation (dense averaged, experts rescaled). */
  async gradients(): Promise<Float32Array> {
    return await this.gpu.read(this.model.params.grads) as Float32Array;
  }
}
