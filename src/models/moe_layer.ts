/**
 * The mixture-of-experts MLP sub-layer shared by every MoE architecture (models/moe.ts's GPT,
 * models/mamba_moe.ts's Mamba): a Switch Transformer layer (Fedus et al., arXiv 2101.03961)
 * for top-1 or a GShard layer (Lepikhin et al., arXiv 2006.16668) for top-2:
 *
 * - router: logits = x·W_rᵀ (W_r (E, C), no bias), p = softmax over the E experts;
 * - routing: each token's top-k experts; first choices take slots before second choices, in
 *   token order, up to capacity ⌈capacityFactor·k·tokens/E⌉ per expert and token group; a
 *   choice over capacity is dropped (its MLP output is 0, the residual carries the token);
 * - combine weights: p of the chosen experts, for k = 2 renormalised over the two (Mixtral,
 *   GShard's g₁/(g₁+g₂)); k = 1 keeps the raw probability as Switch does, so the router learns
 *   from the task loss;
 * - experts: GELU MLPs C → 4C → C, parameters `{prefix}.experts.{e}.c_fc/c_proj`;
 * - load-balancing loss α·E·Σ_e f_e·P_e (Switch eq. 4; f_e = fraction of first choices sent
 *   to e, P_e = mean router probability), averaged over groups and summed over MoE layers,
 *   added to the training loss (recording tapes only) with its gradient through P_e.
 *
 * Routing runs on the GPU (kernels/moe.ts), so forward passes stay synchronous. Tokens may be
 * routed in `groups` independent groups (GShard's local groups): an expert-parallel run routes
 * each rank's tokens as one group, and a single-rank run with groups = dp reproduces it exactly
 * (src/parallel/expert/expert_exchange.ts drives {@link MoELanguageModel.steps} for that).
 *
 * The config, parameter specs and expert placement live in moe_specs.ts.
 */
import type { Gpu } from '../gpu/context.ts';
import { Tensor } from '../gpu/tensor.ts';
import { gelu, linear } from '../autograd/ops.ts';
import { auxLoss, combineRows, dispatchRows, expertLinear, routerGatesOp, routerSoftmax } from '../autograd/moe_ops.ts';
import type { Tape } from '../autograd/tape.ts';
import { assignSlots, type SlotPlan, slotPlan, topKExperts } from '../kernels/moe.ts';
import type { ExpertShard, MoEConfig } from './moe_specs.ts';
import { type ForwardOptions, type ForwardResult, type LanguageModel, type LayeredModel, runPieces } from './model.ts';
import { gpuInput, LOCAL, type ModelContext } from './context.ts';

/** One MoE layer's routing, saved on the model after each forward (tensors owned by the tape). */
export interface Routing {
  plan: SlotPlan;
  /** (N, E) router probabilities. */
  probs: Tensor;
  /** (N, k) i32 chosen experts. */
  top: Tensor;
  /** (N, k) combine weights. */
  gates: Tensor;
  /** (N, k) i32 slot of each choice, −1 when dropped. */
  slot: Tensor;
  /** (E·rows) i32 n·k + j in each slot, −1 when empty. */
  slotSrc: Tensor;
  /** (2·G·E) i32 [fill, first-choice load] per (group, expert). */
  counts: Tensor;
}

/** What the block loop asks the MoE layer to compute: y (N, C) = MoE(x (N, C)) of block `layer`, on `tape`. */
export interface MoECall {
  layer: number;
  x: Tensor;
  tape: Tape;
}

/** One MoE MLP's weights: the router (E, C) and the experts held on this device, in expert order. */
export interface MoEWeights {
  router: Tensor;
  fc: Tensor[];
  fcBias: (Tensor | null)[];
  proj: Tensor[];
  projBias: (Tensor | null)[];
}

/**
 * Routes x (N, C) over `groups` token groups and gathers it into expert slots: returns the
 * routing and xe (E·rows, C), expert e's block at rows [e·rows, (e+1)·rows).
 * @throws Error when groups does not divide N (kernels/moe.ts slotPlan).
 */
export function moeRoute(
  tape: Tape,
  x: Tensor,
  router: Tensor,
  moe: MoEConfig,
  groups: number,
  label = 'moe',
): { routing: Routing; xe: Tensor } {
  const gpu = tape.gpu;
  const { nExpert: e, topK: k, capacityFactor } = moe;
  const c = router.shape[1], n = x.size / c;
  const align = Math.max(64, gpu.device.limits.minStorageBufferOffsetAlignment / 4);
  const plan = slotPlan(n, e, k, groups, capacityFactor, c, align);
  // The tape allocates f32 only; integer routing tensors are freed with it.
  const int = (shape: number[], name: string) => {
    const t = gpu.empty(shape, 'i32', `${label}.${name}`);
    tape.onDispose(() => t.release());
    return t;
  };
  const logits = linear(tape, x, router, null, `${label}.router`); // (N, E)
  const probs = routerSoftmax(tape, logits, n, e, `${label}.probs`);
  const top = int([n, k], 'top');
  topKExperts(gpu, probs, top, n, e, k);
  const gates = routerGatesOp(tape, probs, top, n, e, k, k > 1, `${label}.gates`);
  const slot = int([n, k], 'slot'), slotSrc = int([e * plan.rows], 'slotSrc'), counts = int([2 * groups * e], 'counts');
  assignSlots(gpu, top, slot, slotSrc, counts, plan);
  const routing: Routing = { plan, probs, top, gates, slot, slotSrc, counts };
  return { routing, xe: dispatchRows(tape, x, slot, slotSrc, n, k, c, `${label}.dispatch`) };
}

/** ye (count·rows, C) = the experts of `w` applied to their blocks of xe (count·rows, C): GELU MLPs C → 4C → C. */
export function moeExperts(tape: Tape, xe: Tensor, w: MoEWeights, rows: number, label = 'moe.experts'): Tensor {
  const up = expertLinear(tape, xe, w.fc, w.fcBias, rows, `${label}.c_fc`);
  return expertLinear(tape, gelu(tape, up, `${label}.gelu`), w.proj, w.projBias, rows, `${label}.c_proj`);
}

/** y (N, C) = Σ_j gate · expert output over each token's kept choices (0 for a token whose choices were all dropped). */
export function moeCombine(tape: Tape, ye: Tensor, r: Routing, c: number, label = 'moe.combine'): Tensor {
  return combineRows(tape, ye, r.gates, r.slot, r.slotSrc, r.plan.n, r.plan.k, c, label);
}

/** A whole MoE MLP on one device (w holds every expert): y (N, C) and its routing. */
export function moeMlp(
  tape: Tape,
  x: Tensor,
  w: MoEWeights,
  moe: MoEConfig,
  label = 'moe',
): { y: Tensor; routing: Routing } {
  const { routing, xe } = moeRoute(tape, x, w.router, moe, moe.groups ?? 1, label);
  const c = w.router.shape[1];
  return {
    y: moeCombine(tape, moeExperts(tape, xe, w, routing.plan.rows, `${label}.experts`), routing, c, `${label}.combine`),
    routing,
  };
}

/**
 * The training loss with every MoE layer's load-balancing term added (recording tapes with
 * α > 0 only): (2) [CE + Σ aux, count]; the aux sum stays readable at index 2 of the buffer.
 */
export function withAuxLoss(tape: Tape, loss: Tensor, routings: Routing[], moe: MoEConfig, gradScale: number): Tensor {
  if (!tape.recording || moe.auxLossWeight === 0 || routings.length === 0) return loss;
  let out = loss;
  for (const r of routings) out = auxLoss(tape, r.probs, r.counts, out, r.plan, moe.auxLossWeight, gradScale);
  return new Tensor(tape.gpu, out.buffer, [2], 'f32', out.offset, false, 'loss');
}

/**
 * The MoE sub-layers of one model: block `layer`'s weights live under `prefix(layer)`
 * (`transformer.h.{i}.mlp` in GPT, `backbone.layers.{i}.moe` in Mamba) and this device holds
 * the experts of `shard`. Records the routing of every MoE layer of the current forward pass.
 */
export class MoELayers {
  /** The routing of every MoE layer in the last forward pass (valid until that tape is disposed). */
  lastRouting: Routing[] = [];
  /**
   * Called with every routing {@link route} makes (a trainer's routing log, src/parallel/expert/moe_routing.ts), or
   * null.
   */
  onRoute: ((layer: number, r: Routing) => void) | null = null;

  /** @param c width C; @param bias whether the experts' Linears have biases. */
  constructor(
    readonly moe: MoEConfig,
    readonly shard: ExpertShard,
    readonly c: number,
    readonly bias: boolean,
    private readonly p: (name: string) => Tensor,
    readonly prefix: (layer: number) => string,
  ) {}

  /** Block `layer`'s MoE weights (this shard's experts). */
  weights(layer: number): MoEWeights {
    const h = this.prefix(layer);
    const ids = [...Array(this.shard.count).keys()].map((i) => i + this.shard.first);
    const get = (n: string) => ids.map((e) => this.p(`${h}.experts.${e}.${n}`));
    const bias = (n: string) => (this.bias ? get(`${n}.bias`) : ids.map(() => null));
    return {
      router: this.p(`${h}.router.weight`),
      fc: get('c_fc.weight'),
      fcBias: bias('c_fc'),
      proj: get('c_proj.weight'),
      projBias: bias('c_proj'),
    };
  }

  /** {@link moeRoute} for block `layer`, recorded in {@link lastRouting}. */
  route(tape: Tape, x: Tensor, layer: number, groups = this.moe.groups ?? 1): { routing: Routing; xe: Tensor } {
    const out = moeRoute(tape, x, this.p(`${this.prefix(layer)}.router.weight`), this.moe, groups, this.prefix(layer));
    this.lastRouting.push(out.routing);
    this.onRoute?.(layer, out.routing);
    return out;
  }

  /** {@link moeExperts} with this shard's experts of block `layer`. */
  experts(tape: Tape, xe: Tensor, layer: number, rows: number): Tensor {
    return moeExperts(tape, xe, this.weights(layer), rows, `${this.prefix(layer)}.experts`);
  }

  /** {@link moeCombine} for block `layer`. */
  combine(tape: Tape, ye: Tensor, r: Routing, layer: number): Tensor {
    return moeCombine(tape, ye, r, this.c, `${this.prefix(layer)}.combine`);
  }

  /** The MoE MLP of block `call.layer` with every expert on this device: y (N, C). */
  local(tape: Tape, call: MoECall): Tensor {
    const { routing, xe } = this.route(tape, call.x, call.layer);
    return this.combine(tape, this.experts(tape, xe, call.layer, routing.plan.rows), routing, call.layer);
  }
}

/** A language model with MoE sub-layers whose forward pass can be driven layer by layer. */
export interface MoELanguageModel extends LanguageModel {
  readonly gpu: Gpu;
  readonly moe: MoEConfig;
  readonly shard: ExpertShard;
  readonly moeLayers: MoELayers;
  /**
   * The forward pass with each MoE MLP computed by `moe` (its output (N, C)), so the local
   * driver ({@link forwardLocal}) and the expert-parallel one share it.
   */
  steps(
    tape: Tape,
    tokens: Tensor,
    hostTokens: Int32Array,
    targets: Tensor | null,
    b: number,
    t: number,
    opts: ForwardOptions,
    moe: MoEFn,
  ): Promise<ForwardResult>;
}

/** Computes one MoE MLP: on this device, or across an expert-parallel group. */
export type MoEFn = (call: MoECall) => Tensor | Promise<Tensor>;

/** {@link MoELanguageModel.steps} with every MoE MLP on this device. @throws Error on a model holding a shard of the experts. */
export function forwardLocal(
  model: MoELanguageModel,
  tape: Tape,
  tokens: Tensor,
  hostTokens: Int32Array,
  targets: Tensor | null,
  b: number,
  t: number,
  opts: ForwardOptions = {},
): Promise<ForwardResult> {
  if (model.shard.count !== model.moe.nExpert) {
    throw new Error(
      `${model.arch}.forward: this model holds a shard of the experts; run it with forwardExpertParallel (src/parallel/expert/expert_exchange.ts)`,
    );
  }
  return model.steps(tape, tokens, hostTokens, targets, b, t, opts, (call) => model.moeLayers.local(tape, call));
}

/**
 * A {@link ModelContext} that also computes the MoE MLPs: on this device ({@link MoELayers.local})
 * or across an expert-parallel group (src/parallel/expert/expert_exchange.ts).
 */
export interface MoEContext extends ModelContext {
  moe: MoEFn;
}

/** The MoE function `ctx` carries. @throws Error when it carries none (`what` names the model). */
export function moeOf(ctx: ModelContext, what: string): MoEFn {
  const moe = (ctx as Partial<MoEContext>).moe;
  if (!moe) {
    throw new Error(
      `${what}: this context has no MoE function (ctx.moe); run the model through its forward or steps (models/moe_layer.ts MoEContext)`,
    );
  }
  return moe;
}

/**
 * {@link MoELanguageModel.steps} of a model written as pieces: its pieces over LOCAL with `moe`
 * computing the MoE MLPs, then every MoE layer's load-balancing term added to the loss
 * ({@link withAuxLoss}; recording tapes only).
 */
export async function moeSteps(
  model: MoELanguageModel & LayeredModel,
  tape: Tape,
  tokens: Tensor,
  hostTokens: Int32Array,
  targets: Tensor | null,
  b: number,
  t: number,
  opts: ForwardOptions,
  moe: MoEFn,
): Promise<ForwardResult> {
  model.moeLayers.lastRouting = [];
  const ctx: MoEContext = { ...LOCAL, moe };
  const out = await runPieces(model, ctx, tape, gpuInput(tokens, hostTokens, targets), b, t, opts);
  return {
    logits: out.logits,
    loss: out.loss && withAuxLoss(tape, out.loss, model.moeLayers.lastRouting, model.moe, opts.gradScale ?? 1),
  };
}
