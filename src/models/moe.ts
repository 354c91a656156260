/**
 * GPT with mixture-of-experts MLPs: nanoGPT's GPT (gpt.ts) whose MLP in every `moeEvery`-th
 * block is the shared MoE sub-layer of moe_layer.ts (Switch Transformer top-1 / GShard top-2
 * routing with capacity, load-balancing loss), parameters `transformer.h.{i}.mlp.router/experts`.
 * The load-balancing term is added to the training loss on recording tapes only; evaluation
 * reports the plain cross-entropy. The unchanged Trainer trains it; expert parallelism
 * (src/parallel/expert_parallel.ts) drives {@link GPTMoE.steps} across ranks.
 */
import type { Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { add, attention, embedding, flashAttention, gelu, layerNorm, linear } from '../autograd/ops.ts';
import { lmHeadLoss } from './head.ts';
import type { Tape } from '../autograd/tape.ts';
import { applyNeftune } from '../kernels/noise.ts';
import { type ParamSpec, ParamStore } from '../nn/params.ts';
import { type GPTConfig, gptParamSpecs, validateGPTConfig } from './gpt.ts';
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
  type Routing,
  shardedSpecs,
  validateMoEConfig,
  withAuxLoss,
} from './moe_layer.ts';

export {
  DEFAULT_MOE,
  type ExpertShard,
  expertOf,
  isMoELayer,
  type MoECall,
  moeCombine,
  type MoEConfig,
  moeExperts,
  moeLayerSpecs,
  moeMlp,
  moeRoute,
  type MoEWeights,
  type Routing,
  validateMoEConfig,
  withAuxLoss,
} from './moe_layer.ts';

/** nanoGPT's parameters with each MoE block's `mlp.c_fc` / `mlp.c_proj` replaced, in place, by {@link moeLayerSpecs}. */
export function moeParamSpecs(cfg: GPTConfig, moe: MoEConfig): ParamSpec[] {
  const out: ParamSpec[] = [];
  for (const s of gptParamSpecs(cfg)) {
    const m = /^transformer\.h\.(\d+)\.mlp\.(c_fc|c_proj)\.(weight|bias)$/.exec(s.name);
    if (!m || !isMoELayer(moe, Number(m[1]))) out.push(s);
    else if (m[2] === 'c_fc' && m[3] === 'weight') {
      out.push(...moeLayerSpecs(`transformer.h.${m[1]}.mlp`, cfg.nEmbd, moe.nExpert, cfg.bias, 0.02 / Math.sqrt(2 * cfg.nLayer)));
    }
  }
  return out;
}

export class GPTMoE implements MoELanguageModel {
  readonly arch = 'gpt-moe';
  readonly params: ParamStore;
  readonly shard: ExpertShard;
  readonly moeLayers: MoELayers;
  private readonly p: (name: string) => Tensor;

  /**
   * Builds the model with weights drawn from `seed`; with `shard`, only those experts' weights
   * are kept, equal to the full model's (every weight is drawn, in the full declaration order).
   * @throws Error from the GPT and MoE config checks, or for a shard outside 0 … E.
   */
  constructor(readonly gpu: Gpu, readonly cfg: GPTConfig, readonly moe: MoEConfig, seed: number, shard?: ExpertShard) {
    validateGPTConfig(cfg);
    validateMoEConfig(moe);
    this.shard = shard ?? { first: 0, count: moe.nExpert };
    this.params = new ParamStore(gpu, shardedSpecs(moeParamSpecs(cfg, moe), seed, moe.nExpert, this.shard, 'GPTMoE'), () => 0);
    this.p = (name) => this.params.get(name).value;
    this.moeLayers = new MoELayers(moe, this.shard, cfg.nEmbd, cfg.bias, this.p, (i) => `transformer.h.${i}.mlp`);
  }

  /** The routing of every MoE layer in the last forward pass (valid until that tape is disposed). */
  get lastRouting(): Routing[] {
    return this.moeLayers.lastRouting;
  }

  /** See {@link LanguageModel.forward}. @throws Error on a sharded model (use the expert-parallel forward). */
  forward(tape: Tape, tokens: Tensor, hostTokens: Int32Array, targets: Tensor | null, b: number, t: number, opts: ForwardOptions = {}): ForwardResult {
    return forwardLocal(this, tape, tokens, hostTokens, targets, b, t, opts);
  }

  /** See {@link MoELanguageModel.steps}. */
  *steps(tape: Tape, tokens: Tensor, hostTokens: Int32Array, targets: Tensor | null, b: number, t: number, opts: ForwardOptions = {}): Generator<MoECall, ForwardResult, Tensor> {
    const { nLayer, nHead: nh, nEmbd: c, bias } = this.cfg;
    const p = this.p;
    const pb = (name: string) => (bias ? p(name) : null);
    this.moeLayers.lastRouting = [];
    const wte = p('transformer.wte.weight');
    let x = embedding(tape, tokens, hostTokens, wte, p('transformer.wpe.weight'), b, t); // (B, T, C)
    applyNeftune(this.gpu, x, b, t, c, opts.neftune);
    for (let i = 0; i < nLayer; i++) {
      const h = `transformer.h.${i}`;
      const a = layerNorm(tape, x, p(`${h}.ln_1.weight`), p(`${h}.ln_1.bias`), `${h}.ln_1`);
      const qkv = linear(tape, a, p(`${h}.attn.c_attn.weight`), pb(`${h}.attn.c_attn.bias`), `${h}.c_attn`);
      const attn = this.cfg.attention === 'naive' ? attention : flashAttention;
      const y = attn(tape, qkv, { b, t, c, nh }, `${h}.attn`);
      x = add(tape, x, linear(tape, y, p(`${h}.attn.c_proj.weight`), pb(`${h}.attn.c_proj.bias`), `${h}.c_proj`), `${h}.res1`);
      const m = layerNorm(tape, x, p(`${h}.ln_2.weight`), p(`${h}.ln_2.bias`), `${h}.ln_2`); // (B·T, C)
      let down: Tensor;
      if (isMoELayer(this.moe, i)) down = yield { layer: i, x: m };
      else {
        const up = gelu(tape, linear(tape, m, p(`${h}.mlp.c_fc.weight`), pb(`${h}.mlp.c_fc.bias`), `${h}.c_fc`), `${h}.gelu`);
        down = linear(tape, up, p(`${h}.mlp.c_proj.weight`), pb(`${h}.mlp.c_proj.bias`), `${h}.mlp_proj`);
      }
      x = add(tape, x, down, `${h}.res2`);
    }
    const xf = layerNorm(tape, x, p('transformer.ln_f.weight'), p('transformer.ln_f.bias'), 'ln_f');
    if (!targets) return { logits: linear(tape, xf, wte, null, 'lm_head'), loss: null };
    const { logits, loss } = lmHeadLoss(tape, xf, wte, targets, opts.gradScale ?? 1); // row-chunked past a binding
    return { logits, loss: withAuxLoss(tape, loss, this.moeLayers.lastRouting, this.moe, opts.gradScale ?? 1) };
  }

  /** The MoE MLP of block `call.layer` with every expert on this device (moe_layer.ts {@link MoELayers.local}). */
  moeLocal(tape: Tape, call: MoECall): Tensor {
    return this.moeLayers.local(tape, call);
  }

  /** Parameters held here without the positional table (nanoGPT's get_num_params convention). */
  numParams(): number {
    return this.params.count - this.cfg.blockSize * this.cfg.nEmbd;
  }

  describe(): string {
    const { nLayer, nHead, nEmbd, blockSize } = this.cfg;
    const { nExpert, topK, capacityFactor, moeEvery } = this.moe;
    return `gpt-moe · ${nLayer} layers · ${nHead} heads · width ${nEmbd} · block ${blockSize} · ${nExpert} experts top-${topK} every ${moeEvery} · capacity ×${capacityFactor}`;
  }

  /** Training FLOPs per token: 6·(active parameters: dense + router + topK experts per MoE layer) + 12·L·C·T. */
  flopsPerToken(t: number): number {
    const { nLayer: L, nEmbd: C, bias } = this.cfg;
    const full = moeParamSpecs(this.cfg, this.moe).reduce((a, s) => a + s.shape.reduce((x, y) => x * y, 1), 0) - this.cfg.blockSize * C;
    return 6 * (full - inactiveExpertParams(this.moe, L, C, bias)) + 12 * L * C * t;
  }
}
