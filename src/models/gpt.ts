/**
 * GPT as in nanoGPT (karpathy/nanoGPT model.py): learned positional embedding, pre-LayerNorm
 * blocks of causal self-attention and a GELU MLP, final LayerNorm, and the output projection
 * tied to the token embedding. Parameter names follow nanoGPT's state dict.
 */
import type { Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { add, gelu, layerNorm } from '../autograd/ops.ts';
import type { Tape } from '../autograd/tape.ts';
import { type ParamSpec, ParamStore, type Placement, placeSpecs } from '../nn/params.ts';
import { type ForwardOptions, type ForwardResult, type Piece, PieceModel, realVocabOf } from './model.ts';
import type { Maybe, ModelContext, ModelInput } from './context.ts';
import { Random } from '../util/random.ts';
import { embeddingInit } from './vocab_pad.ts';

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
  /** The tokenizer's V when vocabSize is padded (--pad-vocab; models/model.ts ModelShape). */
  realVocab?: number;
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
    { name: 'transformer.wte.weight', shape: [V, C], init: embeddingInit(std, realVocabOf(cfg), C), decay: true },
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

/** The piece of the GPT that uses parameter `name` (see {@link GPT.pieceOf}). */
export function gptPieceOf(name: string): Piece {
  const block = /^transformer\.h\.(\d+)\./.exec(name);
  if (block) return Number(block[1]);
  if (name === 'transformer.wte.weight') return 'tied';
  if (name.startsWith('transformer.ln_f.')) return 'head';
  return 'embed';
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

export class GPT extends PieceModel {
  readonly arch: string = 'gpt';
  readonly params: ParamStore;
  readonly nLayer: number;

  /**
   * Builds the model with weights drawn from `seed`; with `place`, only this rank's shards of
   * the parameters it holds (nn/params.ts placeSpecs), equal to the single-rank model's.
   * `specs` replaces {@link gptParamSpecs} for a subclass that declares other parameters (gpt-moe).
   */
  constructor(readonly gpu: Gpu, readonly cfg: GPTConfig, seed: number, place?: Placement, specs?: ParamSpec[]) {
    super();
    validateGPTConfig(cfg);
    this.nLayer = cfg.nLayer;
    const rng = new Random(seed), random = () => rng.normal(), all = specs ?? gptParamSpecs(cfg);
    this.params = new ParamStore(gpu, place ? placeSpecs(all, random, place) : all, random);
  }

  protected p(name: string): Tensor {
    return this.params.get(name).value;
  }

  /** A Linear's output through the context; the bias only when the config has biases. */
  private lin(ctx: ModelContext, tape: Tape, x: Tensor, name: string, label: string): Maybe<Tensor> {
    return ctx.linear(tape, x, name, this.p(`${name}.weight`), this.cfg.bias ? this.p(`${name}.bias`) : null, label);
  }

  /** x (B, T, C) = wte[tokens] + wpe[positions], plus NEFTune noise in training passes. */
  async embed(
    ctx: ModelContext,
    tape: Tape,
    input: ModelInput,
    b: number,
    t: number,
    opts: ForwardOptions,
  ): Promise<Tensor> {
    const tables = {
      wte: this.p('transformer.wte.weight'),
      positions: this.p('transformer.wpe.weight'),
      learned: true,
    };
    return await this.embedTokens(ctx, tape, input, tables, b, t, opts); // (B, T, C)
  }

  /** Block i: x + attn(ln_1(x)), then + {@link mlp}(ln_2(x)); x (B·T, C). */
  block(ctx: ModelContext, tape: Tape, x: Tensor, i: number, b: number, t: number): Promise<Tensor> {
    return this.blockAt(ctx, tape, x, i, `transformer.h.${i}`, b, t);
  }

  /**
   * The pre-LayerNorm block whose parameters are named under `h` (block i's is `transformer.h.i`;
   * recurrent-depth names its core blocks otherwise and runs them several times); x (B·T, C).
   */
  protected async blockAt(
    ctx: ModelContext,
    tape: Tape,
    x: Tensor,
    i: number,
    h: string,
    b: number,
    t: number,
  ): Promise<Tensor> {
    const { nHead: nh, nEmbd: c } = this.cfg, p = (n: string) => this.p(n);
    const a = layerNorm(tape, x, p(`${h}.ln_1.weight`), p(`${h}.ln_1.bias`), `${h}.ln_1`); // (B·T, C)
    const qkv = await this.lin(ctx, tape, a, `${h}.attn.c_attn`, `${h}.c_attn`); // (B·T, 3C)
    const y = await ctx.attention(tape, qkv, { b, t, c, nh }, `${h}.attn`, this.cfg.attention === 'naive'); // (B, T, C)
    x = add(tape, x, await this.lin(ctx, tape, y, `${h}.attn.c_proj`, `${h}.c_proj`), `${h}.res1`); // (B·T, C)
    const m = layerNorm(tape, x, p(`${h}.ln_2.weight`), p(`${h}.ln_2.bias`), `${h}.ln_2`);
    return add(tape, x, await this.mlp(ctx, tape, m, i, h), `${h}.res2`); // (B·T, C)
  }

  /**
   * Block i's MLP (parameters under `${h}.mlp`) on m = ln_2(x) (B·T, C): c_proj(gelu(c_fc(m))),
   * (B·T, C). Overridden by gpt-moe for its mixture-of-experts blocks.
   */
  protected async mlp(ctx: ModelContext, tape: Tape, m: Tensor, _i: number, h: string): Promise<Tensor> {
    const up = gelu(tape, await this.lin(ctx, tape, m, `${h}.mlp.c_fc`, `${h}.c_fc`), `${h}.gelu`); // (B·T, 4C)
    return await this.lin(ctx, tape, up, `${h}.mlp.c_proj`, `${h}.mlp_proj`); // (B·T, C)
  }

  /** ln_f, then the LM head tied to wte (and the loss with targets). */
  head(ctx: ModelContext, tape: Tape, x: Tensor, input: ModelInput, opts: ForwardOptions): Promise<ForwardResult> {
    const xf = layerNorm(tape, x, this.p('transformer.ln_f.weight'), this.p('transformer.ln_f.bias'), 'ln_f'); // (B·T, C)
    return Promise.resolve(ctx.head(tape, xf, this.p('transformer.wte.weight'), input, opts, realVocabOf(this.cfg)));
  }

  /** Blocks by index; wpe with the embedding, ln_f with the head, wte at both ends (tied). */
  pieceOf(name: string): Piece {
    return gptPieceOf(name);
  }

  /** Parameter count without the positional table (nanoGPT's get_num_params convention). */
  numParams(): number {
    return this.params.count - this.cfg.blockSize * this.cfg.nEmbd;
  }

  describe(): string {
    const { nLayer, nHead, nEmbd, blockSize } = this.cfg;
    return `gpt · ${nLayer} layers · ${nHead} heads · width ${nEmbd} · block ${blockSize} · ${
      this.cfg.attention ?? 'flash'
    } attention`;
  }

  /** Training FLOPs per token (forward + backward): 6N + 12·L·C·T, as nanoGPT's estimate_mfu (PaLM, arXiv 2204.02311, appendix B). */
  flopsPerToken(t: number): number {
    const { nLayer: L, nEmbd: C } = this.cfg;
    return 6 * this.numParams() + 12 * L * C * t;
  }
}
