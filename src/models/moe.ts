/**
 * GPT with mixture-of-experts MLPs: nanoGPT's GPT (gpt.ts) whose MLP in every `moeEvery`-th
 * block is the shared MoE sub-layer of moe_layer.ts (Switch Transformer top-1 / GShard top-2
 * routing with capacity, load-balancing loss), parameters `transformer.h.{i}.mlp.router/experts`.
 * The load-balancing term is added to the training loss on recording tapes only; evaluation
 * reports the plain cross-entropy. The unchanged Trainer trains it; expert parallelism
 * (src/parallel/pipeline/stages.ts over expert_exchange.ts) runs its pieces across ranks.
 */
import type { Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import type { Tape } from '../autograd/tape.ts';
import type { ParamSpec, Placement } from '../nn/params.ts';
import { GPT, type GPTConfig, gptParamSpecs, validateGPTConfig } from './gpt.ts';
import type { ModelContext } from './context.ts';
import type { ForwardOptions, ForwardResult } from './model.ts';
import {
  expertPlacement,
  type ExpertShard,
  inactiveExpertParams,
  isMoELayer,
  type MoEConfig,
  moeLayerSpecs,
  validateMoEConfig,
} from './moe_specs.ts';
import {
  forwardLocal,
  type MoECall,
  type MoEFn,
  type MoELanguageModel,
  MoELayers,
  moeOf,
  moeSteps,
  type Routing,
} from './moe_layer.ts';

export {
  DEFAULT_MOE,
  expertOf,
  type ExpertShard,
  isMoELayer,
  type MoEConfig,
  moeLayerSpecs,
  validateMoEConfig,
} from './moe_specs.ts';
export {
  type MoECall,
  moeCombine,
  moeExperts,
  moeMlp,
  moeRoute,
  type MoEWeights,
  type Routing,
  withAuxLoss,
} from './moe_layer.ts';

/** nanoGPT's parameters with each MoE block's `mlp.c_fc` / `mlp.c_proj` replaced, in place, by {@link moeLayerSpecs}. */
export function moeParamSpecs(cfg: GPTConfig, moe: MoEConfig): ParamSpec[] {
  const out: ParamSpec[] = [];
  for (const s of gptParamSpecs(cfg)) {
    const m = /^transformer\.h\.(\d+)\.mlp\.(c_fc|c_proj)\.(weight|bias)$/.exec(s.name);
    if (!m || !isMoELayer(moe, Number(m[1]))) out.push(s);
    else if (m[2] === 'c_fc' && m[3] === 'weight') {
      out.push(
        ...moeLayerSpecs(
          `transformer.h.${m[1]}.mlp`,
          cfg.nEmbd,
          moe.nExpert,
          cfg.bias,
          0.02 / Math.sqrt(2 * cfg.nLayer),
        ),
      );
    }
  }
  return out;
}

/**
 * nanoGPT's GPT (its embedding, attention, dense MLPs and head are gpt.ts's pieces) whose MoE
 * blocks' MLP is the MoE function the context carries (moe_layer.ts {@link MoEContext}).
 */
export class GPTMoE extends GPT implements MoELanguageModel {
  override readonly arch = 'gpt-moe';
  readonly shard: ExpertShard;
  readonly moeLayers: MoELayers;

  /**
   * Builds the model with weights drawn from `seed`; with `shard`, only those experts' weights
   * are kept, equal to the full model's (every weight is drawn, in the full declaration order);
   * with `place`, that placement of what the shard keeps (nn/params.ts placeSpecs).
   * @throws Error from the GPT and MoE config checks, or for a shard outside 0 … E.
   */
  constructor(gpu: Gpu, cfg: GPTConfig, readonly moe: MoEConfig, seed: number, shard?: ExpertShard, place?: Placement) {
    validateGPTConfig(cfg);
    validateMoEConfig(moe);
    const own = shard ?? { first: 0, count: moe.nExpert };
    super(gpu, cfg, seed, expertPlacement(moe.nExpert, own, 'GPTMoE', place), moeParamSpecs(cfg, moe));
    this.shard = own;
    this.moeLayers = new MoELayers(
      moe,
      own,
      cfg.nEmbd,
      cfg.bias,
      (name) => this.p(name),
      (i) => `transformer.h.${i}.mlp`,
    );
  }

  /** The routing of every MoE layer in the last forward pass (valid until that tape is disposed). */
  get lastRouting(): Routing[] {
    return this.moeLayers.lastRouting;
  }

  /** See {@link LanguageModel.forward}. @throws Error on a sharded model (use the expert-parallel forward). */
  override forward(
    tape: Tape,
    tokens: Tensor,
    hostTokens: Int32Array,
    targets: Tensor | null,
    b: number,
    t: number,
    opts: ForwardOptions = {},
  ): Promise<ForwardResult> {
    return forwardLocal(this, tape, tokens, hostTokens, targets, b, t, opts);
  }

  /** See {@link MoELanguageModel.steps}: GPT's pieces over LOCAL with `moe`, plus the load-balancing loss. */
  steps(
    tape: Tape,
    tokens: Tensor,
    hostTokens: Int32Array,
    targets: Tensor | null,
    b: number,
    t: number,
    opts: ForwardOptions,
    moe: MoEFn,
  ): Promise<ForwardResult> {
    return moeSteps(this, tape, tokens, hostTokens, targets, b, t, opts, moe);
  }

  /** The MoE blocks' MLP through the context's MoE function; GPT's dense MLP elsewhere. */
  protected override async mlp(ctx: ModelContext, tape: Tape, m: Tensor, i: number, h: string): Promise<Tensor> {
    if (!isMoELayer(this.moe, i)) return await super.mlp(ctx, tape, m, i, h);
    return await moeOf(ctx, this.arch)({ layer: i, x: m, tape });
  }

  /** The MoE MLP of block `call.layer` with every expert on this device (moe_layer.ts {@link MoELayers.local}). */
  moeLocal(tape: Tape, call: MoECall): Tensor {
    return this.moeLayers.local(tape, call);
  }

  override describe(): string {
    const { nLayer, nHead, nEmbd, blockSize } = this.cfg;
    const { nExpert, topK, capacityFactor, moeEvery } = this.moe;
    return `gpt-moe · ${nLayer} layers · ${nHead} heads · width ${nEmbd} · block ${blockSize} · ${nExpert} experts top-${topK} every ${moeEvery} · capacity ×${capacityFactor}`;
  }

  /** Training FLOPs per token: 6·(active parameters: dense + router + topK experts per MoE layer) + 12·L·C·T. */
  override flopsPerToken(t: number): number {
    const { nLayer: L, nEmbd: C, bias } = this.cfg;
    const full = moeParamSpecs(this.cfg, this.moe).reduce((a, s) => a + s.shape.reduce((x, y) => x * y, 1), 0) -
      this.cfg.blockSize * C;
    return 6 * (full - inactiveExpertParams(this.moe, L, C, bias)) + 12 * L * C * t;
  }
}
