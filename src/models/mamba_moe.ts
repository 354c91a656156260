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
import { ParamStore } from '../nn/params.ts';
import { embedTokens, lmHead, SpecList, zeroPositions } from './common.ts';
import { mambaBlock, mambaBlockSpecs, type MambaConfig, validateMambaConfig } from './mamba.ts';
import type { ForwardOptions, ForwardResult } from './model.ts';
import {
  type ExpertShard,
  forwardLocal,
  inactiveExpertParams,
  isMoELayer,
  type MoECall,
  type MoEConfig,
  MoELayers,
  type MoELanguageModel,
  moeLayerSpecs,
  shardedSpecs,
  validateMoEConfig,
  withAuxLoss,
} from './moe_layer.ts';

/** Mamba's shape plus whether the experts' Linears have biases. */
export interface MambaMoEConfig extends MambaConfig {
  bias: boolean;
}

/** Every parameter of the full (unsharded) model, in declaration order. */
export function mambaMoEParamSpecs(cfg: MambaMoEConfig, moe: MoEConfig): SpecList {
  const s = new SpecList(), L = cfg.nLayer, C = cfg.nEmbd, projStd = 0.02 / Math.sqrt(2 * L);
  s.matrix('backbone.embedding.weight', [cfg.vocabSize, C], 0.02);
  for (let i = 0; i < L; i++) {
    const p = `backbone.layers.${i}`;
    mambaBlockSpecs(s, p, cfg, projStd);
    if (!isMoELayer(moe, i)) continue;
    s.constant(`${p}.moe_norm.weight`, [C], 1);
    s.specs.push(...moeLayerSpecs(`${p}.moe`, C, moe.nExpert, cfg.bias, projStd));
  }
  s.constant('backbone.norm_f.weight', [C], 1);
  return s;
}

export class MambaMoE implements MoELanguageModel {
  readonly arch = 'mamba-moe';
  readonly params: ParamStore;
  readonly shard: ExpertShard;
  readonly moeLayers: MoELayers;
  private readonly p: (name: string) => Tensor;
  private readonly noPositions: Tensor;
  /** Parameters of the full model (every expert), for the FLOP count. */
  private readonly fullCount: number;

  /**
   * Builds the model with weights drawn from `seed`; with `shard`, only those experts' weights
   * are kept, equal to the full model's.
   * @throws Error from the Mamba and MoE config checks, or for a shard outside 0 … E.
   */
  constructor(readonly gpu: Gpu, readonly cfg: MambaMoEConfig, readonly moe: MoEConfig, seed: number, shard?: ExpertShard) {
    validateMambaConfig(cfg);
    validateMoEConfig(moe);
    this.shard = shard ?? { first: 0, count: moe.nExpert };
    const specs = mambaMoEParamSpecs(cfg, moe).specs;
    this.fullCount = specs.reduce((a, s) => a + s.shape.reduce((x, y) => x * y, 1), 0);
    this.params = new ParamStore(gpu, shardedSpecs(specs, seed, moe.nExpert, this.shard, 'MambaMoE'), () => 0);
    this.p = (name) => this.params.get(name).value;
    this.noPositions = zeroPositions(gpu, cfg.blockSize, cfg.nEmbd);
    this.moeLayers = new MoELayers(moe, this.shard, cfg.nEmbd, cfg.bias, this.p, (i) => `backbone.layers.${i}.moe`);
  }

  /** See {@link LanguageModel.forward}. @throws Error on a sharded model (use the expert-parallel forward). */
  forward(tape: Tape, tokens: Tensor, hostTokens: Int32Array, targets: Tensor | null, b: number, t: number, opts: ForwardOptions = {}): ForwardResult {
    return forwardLocal(this, tape, tokens, hostTokens, targets, b, t, opts);
  }

  /** See {@link MoELanguageModel.steps}; x is the (B·T, C) residual stream. */
  *steps(tape: Tape, tokens: Tensor, hostTokens: Int32Array, targets: Tensor | null, b: number, t: number, opts: ForwardOptions = {}): Generator<MoECall, ForwardResult, Tensor> {
    const p = this.p;
    this.moeLayers.lastRouting = [];
    const wte = p('backbone.embedding.weight');
    let x = embedTokens(tape, tokens, hostTokens, wte, this.noPositions, b, t, opts); // (B, T, C)
    for (let i = 0; i < this.cfg.nLayer; i++) {
      const n = `backbone.layers.${i}`;
      x = mambaBlock(tape, x, p, n, this.cfg, b, t);
      if (!isMoELayer(this.moe, i)) continue;
      const m = rmsNorm(tape, x, p(`${n}.moe_norm.weight`), `${n}.moe_norm`); // (B·T, C)
      x = add(tape, x, yield { layer: i, x: m }, `${n}.moe_res`);
    }
    const out = lmHead(tape, x, p('backbone.norm_f.weight'), wte, targets, opts);
    return { logits: out.logits, loss: out.loss && withAuxLoss(tape, out.loss, this.moeLayers.lastRouting, this.moe, opts.gradScale ?? 1) };
  }

  /** Parameters held on this device (no positional table to leave out). */
  numParams(): number {
    return this.params.count;
  }

  /** 6·(active parameters: all but the unused E − topK experts per MoE layer) plus Mamba's scan, 27·L·D·N. */
  flopsPerToken(_t: number): number {
    const { nLayer: L, nEmbd: C, dState: N, expand, bias } = this.cfg;
    return 6 * (this.fullCount - inactiveExpertParams(this.moe, L, C, bias)) + 27 * L * expand * C * N;
  }

  describe(): string {
    const { nLayer, nEmbd, dState, expand, blockSize } = this.cfg;
    const { nExpert, topK, capacityFactor, moeEvery } = this.moe;
    return `mamba-moe · ${nLayer} layers · width ${nEmbd} (inner ${expand * nEmbd}) · state ${dState} · block ${blockSize} · ${nExpert} experts top-${topK} every ${moeEvery} · capacity ×${capacityFactor}`;
  }
}
