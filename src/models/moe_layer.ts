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
 * (src/parallel/expert_parallel.ts drives {@link MoELanguageModel.steps} for that).
 */
import type { Gpu } from '../gpu/context.ts';
import { Tensor } from '../gpu/tensor.ts';
import { gelu, linear } from '../autograd/ops.ts';
import { auxLoss, combineRows, dispatchRows, expertLinear, routerGatesOp, routerSoftmax } from '../autograd/moe_ops.ts';
import type { Tape } from '../autograd/tape.ts';
import { assignSlots, type SlotPlan, slotPlan, topKExperts } from '../kernels/moe.ts';
import type { ParamSpec, Placement } from '../nn/params.ts';
import { type ForwardOptions, type ForwardResult, type LanguageModel, type LayeredModel, runPieces } from './model.ts';
import { gpuInput, LOCAL, type ModelContext } from './context.ts';

/** The MoE knobs (config keys nExpert, topK, capacityFactor, auxLossWeight, moeEvery). */
export interface MoEConfig {
  /** Experts E per MoE layer. */
  nExpert: number;
  /** Experts per token: 1 (Switch) or 2 (GShard). */
  topK: number;
  /** Slots per expert = ⌈capacityFactor·topK·tokens/E⌉ per group. */
  capacityFactor: number;
  /** α of the load-balancing loss (Switch uses 0.01); 0 turns it off. */
  auxLossWeight: number;
  /** Every moeEvery-th block (the last of each run of moeEvery) has a MoE MLP; 1 = all. */
  moeEvery: number;
  /** Token groups routed independently (default 1); must divide the tokens B·T of a forward pass. */
  groups?: number;
}

/** Switch Transformer's defaults: top-1, capacity factor 1.25, α = 0.01, every block. */
export const DEFAULT_MOE: Readonly<MoEConfig> = {
  nExpert: 4,
  topK: 1,
  capacityFactor: 1.25,
  auxLossWeight: 0.01,
  moeEvery: 1,
};

/**
 * Checks a MoE config and returns it.
 * @throws Error naming the violated rule (allowed: nExpert ≥ 1, topK 1 or 2 ≤ nExpert,
 *   capacityFactor > 0, auxLossWeight ≥ 0, moeEvery ≥ 1, groups ≥ 1).
 */
export function validateMoEConfig(moe: MoEConfig): MoEConfig {
  const int = (k: keyof MoEConfig, v: number | undefined) => {
    if (v !== undefined && (!Number.isInteger(v) || v < 1)) {
      throw new Error(`moe: ${k} must be a positive integer, got ${v}`);
    }
  };
  int('nExpert', moe.nExpert);
  int('moeEvery', moe.moeEvery);
  int('groups', moe.groups);
  if (moe.topK !== 1 && moe.topK !== 2) throw new Error(`moe: topK must be 1 or 2, got ${moe.topK}`);
  if (moe.topK > moe.nExpert) throw new Error(`moe: topK ${moe.topK} exceeds nExpert ${moe.nExpert}`);
  if (!(moe.capacityFactor > 0)) throw new Error(`moe: capacityFactor must be > 0, got ${moe.capacityFactor}`);
  if (!(moe.auxLossWeight >= 0)) throw new Error(`moe: auxLossWeight must be ≥ 0, got ${moe.auxLossWeight}`);
  return moe;
}

/** Whether block i has a MoE MLP. */
export const isMoELayer = (moe: MoEConfig, i: number) => i % moe.moeEvery === moe.moeEvery - 1;

/** The experts [first, first + count) one expert-parallel rank holds. */
export interface ExpertShard {
  first: number;
  count: number;
}

/**
 * One MoE MLP's parameters under `prefix` (e.g. `transformer.h.3.mlp`): `router.weight` (E, C)
 * ~ N(0, 0.02), then per expert e `experts.{e}.c_fc` (4C, C) ~ N(0, 0.02) and
 * `experts.{e}.c_proj` (C, 4C) ~ N(0, projStd), biases (zeros) when `bias` — the dense MLP's
 * shapes and init (GPT-2), so a Mamba or hybrid block can declare the same layer.
 */
export function moeLayerSpecs(prefix: string, c: number, nExpert: number, bias: boolean, projStd: number): ParamSpec[] {
  const out: ParamSpec[] = [{
    name: `${prefix}.router.weight`,
    shape: [nExpert, c],
    init: { kind: 'normal', std: 0.02 },
    decay: true,
  }];
  const lin = (n: string, shape: number[], std: number) => {
    out.push({ name: `${n}.weight`, shape, init: { kind: 'normal', std }, decay: true });
    if (bias) out.push({ name: `${n}.bias`, shape: [shape[0]], init: { kind: 'const', value: 0 }, decay: false });
  };
  for (let e = 0; e < nExpert; e++) {
    lin(`${prefix}.experts.${e}.c_fc`, [4 * c, c], 0.02);
    lin(`${prefix}.experts.${e}.c_proj`, [c, 4 * c], projStd);
  }
  return out;
}

/**
 * An expert parameter's expert index (any name with `.experts.{e}.`, as {@link moeLayerSpecs}
 * declares) and its block (`.h.{i}.` or `.layers.{i}.`, −1 when absent), or null for dense parameters.
 */
export function expertOf(name: string): { layer: number; expert: number } | null {
  const m = /\.experts\.(\d+)\./.exec(name);
  if (!m) return null;
  const l = /(?:^|\.)(?:h|layers)\.(\d+)\./.exec(name);
  return { layer: l ? Number(l[1]) : -1, expert: Number(m[1]) };
}

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

/** What the block loop asks the MoE layer to compute: y (N, C) = MoE(x (N, C)) of block `layer`. */
export interface MoECall {
  layer: number;
  x: Tensor;
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
      `${model.arch}.forward: this model holds a shard of the experts; run it with forwardExpertParallel (src/parallel/expert_parallel.ts)`,
    );
  }
  return model.steps(tape, tokens, hostTokens, targets, b, t, opts, (call) => model.moeLayers.local(tape, call));
}

/**
 * The {@link Placement} of an expert-parallel rank: every dense parameter and the experts of
 * `shard`, whole (nn/params.ts placeSpecs still draws every weight in declaration order, so a
 * shard's weights equal the full model's); then `outer`'s placement of what it keeps, if given.
 * @throws Error for a shard outside 0 … nExpert (`what` names the model).
 */
export function expertPlacement(nExpert: number, shard: ExpertShard, what: string, outer?: Placement): Placement {
  const { first, count } = shard;
  if (!Number.isInteger(first) || !Number.isInteger(count) || first < 0 || count < 1 || first + count > nExpert) {
    throw new Error(`${what}: expert shard [${first}, ${first + count}) is not inside 0 … ${nExpert}`);
  }
  return (s) => {
    const x = expertOf(s.name);
    if (x && (x.expert < first || x.expert >= first + count)) return null;
    return outer ? outer(s) : { shape: s.shape, slice: (full) => full };
  };
}

/**
 * A {@link ModelContext} that also computes the MoE MLPs: on this device ({@link MoELayers.local})
 * or across an expert-parallel group (src/parallel/expert_parallel.ts).
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

/** Elements of the experts' parameters in the MoE layers a forward does not use: (E − topK) experts per MoE layer. */
export function inactiveExpertParams(moe: MoEConfig, nLayer: number, c: number, bias: boolean): number {
  const moeLayers = [...Array(nLayer).keys()].filter((i) => isMoELayer(moe, i)).length;
  return moeLayers * (moe.nExpert - moe.topK) * (8 * c * c + (bias ? 5 * c : 0));
}
