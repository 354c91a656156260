/**
 * GPT as in nanoGPT (karpathy/nanoGPT model.py): learned positional embedding, pre-LayerNorm
 * blocks of causal self-attention and a GELU MLP, final LayerNorm, and the output projection
 * tied to the token embedding. Parameter names follow nanoGPT's state dict.
 */
import type { Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { add, attention, embedding, flashAttention, gelu, layerNorm, linear } from '../autograd/ops.ts';
import type { Tape } from '../autograd/tape.ts';
import { type ParamSpec, ParamStore } from '../nn/params.ts';
import type { ForwardOptions, ForwardResult, LanguageModel } from './model.ts';
import { Random } from '../util/random.ts';
import { applyNeftune } from '../kernels/noise.ts';
import { lmHeadLoss } from './head.ts';

/** Model shape (nanoGPT's GPTConfig). */
export interface GPTConfig {
  /** Vocabulary size V, set from the tokenizer. */
  vocabSize: number;
  /** Longest sequence T the positional table holds. */
  blockSize: number;
  /** Transformer blocks. */
  nLayer: number;
  /** Attention heads; must divide nEmbd. */
  nHead: number;
  /** Width C. */
  nEmbd: number;
  /** Biases in the Linear layers (LayerNorms always have one). */
  bias: boolean;
  /** Attention kernel: FlashAttention-2 (default) or the materialised T×T version. */
  attention?: 'flash' | 'naive';
}

/**
 * Parameter declarations in nanoGPT's order and initialisation: N(0, 0.02) everywhere,
 * N(0, 0.02/√(2L)) for the residual projections (GPT-2 paper §2.3), zeros for biases,
 * ones for LayerNorm weights.
 */
export function gptParamSpecs(cfg: GPTConfig): ParamSpec[] {
  const { vocabSize: V, blockSize, nLayer: L, nEmbd: C, bias } = cfg;
  const std = 0.02;
  const projStd = 0.02 / Math.sqrt(2 * L);
  const specs: ParamSpec[] = [
    { name: 'transformer.wte.weight', shape: [V, C], init: { kind: 'normal', std }, decay: true },
    { name: 'transformer.wpe.weight', shape: [blockSize, C], init: { kind: 'normal', std }, decay: true },
  ];
  const ln = (n: string) => {
    specs.push({ name: `${n}.weight`, shape: [C], init: { kind: 'const', value: 1 }, decay: false });
    specs.push({ name: `${n}.bias`, shape: [C], init: { kind: 'const', value: 0 }, decay: false });
  };
  const lin = (n: string, out: number, inp: number, s: number) => {
    specs.push({ name: `${n}.weight`, shape: [out, inp], init: { kind: 'normal', std: s }, decay: true });
    if (bias) specs.push({ name: `${n}.bias`, shape: [out], init: { kind: 'const', value: 0 }, decay: false });
  };
  for (let i = 0; i < L; i++) {
    const h = `transformer.h.${i}`;
    ln(`${h}.ln_1`);
    lin(`${h}.attn.c_attn`, 3 * C, C, std);
    lin(`${h}.attn.c_proj`, C, C, projStd);
    ln(`${h}.ln_2`);
    lin(`${h}.mlp.c_fc`, 4 * C, C, std);
    lin(`${h}.mlp.c_proj`, C, 4 * C, projStd);
  }
  ln('transformer.ln_f');
  return specs;
}

/**
 * Checks a config and returns it.
 * @throws Error stating the violated rule (e.g. heads not dividing width).
 */
export function validateGPTConfig(cfg: GPTConfig): GPTConfig {
  for (const k of ['vocabSize', 'blockSize', 'nLayer', 'nHead', 'nEmbd'] as const) {
    if (!Number.isInteger(cfg[k]) || cfg[k] < 1) throw new Error(`${k} must be a positive integer, got ${cfg[k]}`);
  }
  if (cfg.nEmbd % cfg.nHead !== 0) {
    throw new Error(`n_embd (${cfg.nEmbd}) must be divisible by n_head (${cfg.nHead})`);
  }
  return cfg;
}

export class GPT implements LanguageModel {
  readonly arch = 'gpt';
  readonly params: ParamStore;
  private readonly p: (name: string) => Tensor;

  /** Builds the model with weights drawn from `seed`. */
  constructor(readonly gpu: Gpu, readonly cfg: GPTConfig, seed: number) {
    validateGPTConfig(cfg);
    const rng = new Random(seed);
    this.params = new ParamStore(gpu, gptParamSpecs(cfg), () => rng.normal());
    this.p = (name) => this.params.get(name).value;
  }

  /** See {@link LanguageModel.forward}. */
  forward(tape: Tape, tokens: Tensor, hostTokens: Int32Array, targets: Tensor | null, b: number, t: number, opts: ForwardOptions = {}): ForwardResult {
    const { nLayer, nHead: nh, nEmbd: c, bias } = this.cfg;
    const p = this.p;
    const pb = (name: string) => (bias ? p(name) : null);
    const wte = p('transformer.wte.weight');
    let x = embedding(tape, tokens, hostTokens, wte, p('transformer.wpe.weight'), b, t); // (B, T, C)
    applyNeftune(this.gpu, x, b, t, c, opts.neftune); // in place: the embedding backward does not read x
    for (let i = 0; i < nLayer; i++) {
      const h = `transformer.h.${i}`;
      const a = layerNorm(tape, x, p(`${h}.ln_1.weight`), p(`${h}.ln_1.bias`), `${h}.ln_1`); // (B·T, C)
      const qkv = linear(tape, a, p(`${h}.attn.c_attn.weight`), pb(`${h}.attn.c_attn.bias`), `${h}.c_attn`); // (B·T, 3C)
      const attn = this.cfg.attention === 'naive' ? attention : flashAttention;
      const y = attn(tape, qkv, { b, t, c, nh }, `${h}.attn`); // (B, T, C)
      const proj = linear(tape, y, p(`${h}.attn.c_proj.weight`), pb(`${h}.attn.c_proj.bias`), `${h}.c_proj`); // (B·T, C)
      x = add(tape, x, proj, `${h}.res1`);
      const m = layerNorm(tape, x, p(`${h}.ln_2.weight`), p(`${h}.ln_2.bias`), `${h}.ln_2`);
      const up = gelu(tape, linear(tape, m, p(`${h}.mlp.c_fc.weight`), pb(`${h}.mlp.c_fc.bias`), `${h}.c_fc`), `${h}.gelu`); // (B·T, 4C)
      const down = linear(tape, up, p(`${h}.mlp.c_proj.weight`), pb(`${h}.mlp.c_proj.bias`), `${h}.mlp_proj`); // (B·T, C)
      x = add(tape, x, down, `${h}.res2`);
    }
    const xf = layerNorm(tape, x, p('transformer.ln_f.weight'), p('transformer.ln_f.bias'), 'ln_f'); // (B·T, C)
    // Weight tied to wte; with targets the head runs in row chunks when (B·T, V) exceeds a binding.
    if (targets) return lmHeadLoss(tape, xf, wte, targets, opts.gradScale ?? 1);
    return { logits: linear(tape, xf, wte, null, 'lm_head'), loss: null }; // (B·T, V)
  }

  /** Parameter count without the positional table (nanoGPT's get_num_params convention). */
  numParams(): number {
    return this.params.count - this.cfg.blockSize * this.cfg.nEmbd;
  }

  describe(): string {
    const { nLayer, nHead, nEmbd, blockSize } = this.cfg;
    return `gpt · ${nLayer} layers · ${nHead} heads · width ${nEmbd} · block ${blockSize} · ${this.cfg.attention ?? 'flash'} attention`;
  }

  /** Training FLOPs per token (forward + backward): 6N + 12·L·C·T, as nanoGPT's estimate_mfu (PaLM, arXiv 2204.02311, appendix B). */
  flopsPerToken(t: number): number {
    const { nLayer: L, nEmbd: C } = this.cfg;
    return 6 * this.numParams() + 12 * L * C * t;
  }
}
