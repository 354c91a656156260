/**
 * MoE-Mamba (Pióro et al., arXiv 2401.04081; the Mamba + MoE interleaving of Jamba, Lieber et
 * al., arXiv 2403.19887): the Mamba LM of mamba.ts whose every `moeEvery`-th block adds, after
 * its mixer, a pre-RMSNorm mixture-of-experts MLP sub-layer with its own residual,
 *   x ← x + Mixer(RMSNorm x);  x ← x + MoE(RMSNorm' x)   (MoE blocks only).
 * The MoE sub-layer is moe_layer.ts's, shared with gpt-moe (same routing, capacity, load-balancing
 * loss, expert-parallel path). Parameters: mamba.ts's, plus per MoE block
 * `backbone.layers.{i}.moe_norm.weight` and `backbone.layers.{i}.moe.router/experts.{e}.…`.
 *
 * Choices, each for a reason:
 * - experts are GPT-2 MLPs C → 4C → C with biases when `bias` (the config's Linear-bias knob),
 *   the same expert as gpt-moe's, so cost.ts / plan.ts count both architectures' experts alike;
 * - MoE-Mamba replaces every other Mamba block by an MoE block; interleaving inside a block
 *   (Jamba's layout) keeps nLayer meaning "Mamba mixers", as for `--arch mamba`;
 * - residual projections (out_proj, c_proj) start at 0.02/√(2L) as in mamba.ts.
 */
import type { Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { add, rmsNorm } from '../autograd/ops.ts';
import type { Tape } from '../autograd/tape.ts';
import type { Placement } from '../nn/params.ts';
import type { SpecList } from './common.ts';
import { Mamba, type MambaConfig, mambaParamSpecs, validateMambaConfig } from './mamba.ts';
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
import { forwardLocal, type MoEFn, type MoELanguageModel, MoELayers, moeOf, moeSteps } from './moe_layer.ts';

/** Mamba's shape plus whether the experts' Linears have biases. */
export interface MambaMoEConfig extends MambaConfig {
  bias: boolean;
}

/** Every parameter of the full (unsharded) model, in declaration order: mamba.ts's, each MoE block followed by its moe_norm and MoE sub-layer. */
export function mambaMoEParamSpecs(cfg: MambaMoEConfig, moe: MoEConfig): SpecList {
  const C = cfg.nEmbd, projStd = 0.02 / Math.sqrt(2 * cfg.nLayer);
  return mambaParamSpecs(cfg, undefined, (s, i) => {
    if (!isMoELayer(moe, i)) return;
    const p = `backbone.layers.${i}`;
    s.constant(`${p}.moe_norm.weight`, [C], 1);
    s.specs.push(...moeLayerSpecs(`${p}.moe`, C, moe.nExpert, cfg.bias, projStd));
  });
}

/** Mamba (its embedding, blocks and head are mamba.ts's pieces) with the MoE sub-layer after every MoE block's mixer. */
export class MambaMoE extends Mamba implements MoELanguageModel {
  override readonly arch = 'mamba-moe';
  readonly shard: ExpertShard;
  readonly moeLayers: MoELayers;
  /** Parameters of the full model (every expert), for the FLOP count. */
  private readonly fullCount: number;

  /**
   * Builds the model with weights drawn from `seed`; with `shard`, only those experts' weights
   * are kept, equal to the full model's; with `place`, that placement of what the shard keeps.
   * @throws Error from the Mamba and MoE config checks, or for a shard outside 0 … E.
   */
  constructor(
    gpu: Gpu,
    override readonly cfg: MambaMoEConfig,
    readonly moe: MoEConfig,
    seed: number,
    shard?: ExpertShard,
    place?: Placement,
  ) {
    validateMambaConfig(cfg);
    validateMoEConfig(moe);
    const own = shard ?? { first: 0, count: moe.nExpert };
    const specs = mambaMoEParamSpecs(cfg, moe).specs;
    super(gpu, cfg, seed, undefined, expertPlacement(moe.nExpert, own, 'MambaMoE', place), specs);
    this.fullCount = specs.reduce((a, s) => a + s.shape.reduce((x, y) => x * y, 1), 0);
    this.shard = own;
    this.moeLayers = new MoELayers(moe, own, cfg.nEmbd, cfg.bias, this.p, (i) => `backbone.layers.${i}.moe`);
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

  /** See {@link MoELanguageModel.steps}: Mamba's pieces over LOCAL with `moe`, plus the load-balancing loss. */
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

  /** After a MoE block's mixer: x + MoE(RMSNorm' x) through the context's MoE function; x (B·T, C). */
  protected override async afterLayer(
    ctx: ModelContext,
    tape: Tape,
    x: Tensor,
    i: number,
    _b: number,
    _t: number,
  ): Promise<Tensor> {
    if (!isMoELayer(this.moe, i)) return x;
    const n = `backbone.layers.${i}`;
    const m = rmsNorm(tape, x, this.p(`${n}.moe_norm.weight`), `${n}.moe_norm`); // (B·T, C)
    return add(tape, x, await moeOf(ctx, this.arch)({ layer: i, x: m, tape }), `${n}.moe_res`);
  }

  /** 6·(active parameters: all but the unused E − topK experts per MoE layer) plus Mamba's scan, 27·L·D·N. */
  override flopsPerToken(_t: number): number {
    const { nLayer: L, nEmbd: C, dState: N, expand, bias } = this.cfg;
    return 6 * (this.fullCount - inactiveExpertParams(this.moe, L, C, bias)) + 27 * L * expand * C * N;
  }

  override describe(): string {
    const { nLayer, nEmbd, dState, expand, blockSize } = this.cfg;
    const { nExpert, topK, capacityFactor, moeEvery } = this.moe;
    return `mamba-moe · ${nLayer} layers · width ${nEmbd} (inner ${
      expand * nEmbd
    }) · state ${dState} · block ${blockSize} · ${nExpert} experts top-${topK} every ${moeEvery} · capacity ×${capacityFactor}`;
  }
}
