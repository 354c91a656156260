/**
 * An RWKV-style language model (Peng et al., RWKV-6 "Finch", arXiv 2404.05892; BlinkDL/RWKV-LM
 * `RWKV-v6/src/model.py`): every block is a time-mixing layer — token shift, linear attention
 * with a data-dependent decay, an output gate — followed by a channel-mixing layer (token shift,
 * relu² MLP, sigmoid receptance gate). No positional table: the decays carry position.
 *
 * The decay comes in two granularities (`decay`):
 * - `head`: one scalar per head and step (GLA's "simple" form; Yang et al. arXiv 2312.06635),
 *   trained with the chunked kernel — the fast path;
 * - `channel`: one per key channel and step plus RWKV's bonus u for the current token,
 *   trained with the one-workgroup-per-head recurrent kernel (RWKV-6's wkv6).
 * Decays are logσ(·)/16 as in GLA, so a fresh model forgets over tens of tokens, not one.
 * Simplifications against RWKV-6: RMSNorm for LayerNorm, and for ln_x's GroupNorm(n_head) a
 * per-head RMSNorm (each head's hs channels normalised on their own, then the [C] gain), static
 * token-shift mixes (no LoRA on μ), a full-rank decay projection.
 *
 * Over a tensor-parallel context the heads split across ranks (src/parallel/tensor/tp_table.ts): r, k,
 * v, gate and the decay projection column-parallel, the decay bias, bonus u and ln_x's gain with
 * their heads, output row-parallel; the channel mix's key / value column- / row-parallel as an
 * MLP, its receptance replicated. ln_x being per head is what lets a rank normalise its own heads.
 *
 * Decoding with a cache (models/decode.ts, docs/design.md#decoding-state-of-the-recurrent-layers) carries per layer
 * what a token needs of the past, as RWKV's RNN mode does: the previous token's normed row for each token shift and the
 * wkv state S (B, H, K, V), which the recurrent kernel advances for both decays.
 */
import type { Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import {
  add,
  lerp,
  logSigmoid,
  mul,
  reluSquared,
  rmsNorm,
  scaleChannels,
  sigmoid,
  silu,
  tokenShift,
} from '../autograd/ops.ts';
import { linearAttention, recurrentLinearAttention } from '../autograd/mixer_ops.ts';
import type { Tape } from '../autograd/tape.ts';
import { ParamStore, type Placement, placeSpecs } from '../nn/params.ts';
import { Random } from '../util/random.ts';
import { checkPositive, SpecList, zeroPositions } from './common.ts';
import { type ForwardOptions, type ForwardResult, type Piece, PieceModel, realVocabOf } from './model.ts';
import type { ModelContext, ModelInput } from './context.ts';

/** Shape of the RWKV-style model. */
export interface LinearConfig {
  vocabSize: number;
  /** The tokenizer's V when vocabSize is padded (--pad-vocab; models/model.ts ModelShape). */
  realVocab?: number;
  /** Longest sequence trained or sampled. */
  blockSize: number;
  nLayer: number;
  /** Heads; head size nEmbd / nHead is both key and value width. */
  nHead: number;
  nEmbd: number;
  /** Decay per head (chunked kernel) or per channel with bonus u (recurrent kernel). */
  decay: 'head' | 'channel';
}

/** GLA's normaliser: g = logσ(x)/16 (fla `GatedLinearAttention`, gate_logit_normalizer). */
const GATE_NORM = 16;

/** Parameters in RWKV-LM's names, nanoGPT-style init (N(0, 0.02), scaled output projections). */
export function linearParamSpecs(cfg: LinearConfig): SpecList {
  const { vocabSize: V, nLayer: L, nEmbd: C, nHead: H } = cfg;
  const s = new SpecList();
  const std = 0.02;
  const projStd = 0.02 / Math.sqrt(2 * L);
  s.embedding('emb.weight', [V, C], std, realVocabOf(cfg));
  const nd = cfg.decay === 'head' ? H : C;
  for (let i = 0; i < L; i++) {
    const p = `blocks.${i}`;
    s.constant(`${p}.ln1.weight`, [C], 1);
    for (const m of ['r', 'k', 'v', 'w', 'g']) s.constant(`${p}.att.time_maa_${m}`, [C], 0.5);
    for (const m of ['receptance', 'key', 'value', 'gate']) s.matrix(`${p}.att.${m}.weight`, [C, C], std);
    s.matrix(`${p}.att.time_decay.weight`, [nd, C], std);
    // Spread the initial decays from short (logσ(−2)/16 ≈ −0.13 per step) to long (≈ −0.001).
    s.values(`${p}.att.time_decay.bias`, [nd], (j) => -2 + (6 * j) / Math.max(1, nd - 1));
    if (cfg.decay === 'channel') s.constant(`${p}.att.time_faaaa`, [C], 1);
    s.constant(`${p}.att.ln_x.weight`, [C], 1);
    s.matrix(`${p}.att.output.weight`, [C, C], projStd);
    s.constant(`${p}.ln2.weight`, [C], 1);
    for (const m of ['k', 'r']) s.constant(`${p}.ffn.time_maa_${m}`, [C], 0.5);
    s.matrix(`${p}.ffn.key.weight`, [4 * C, C], std);
    s.matrix(`${p}.ffn.value.weight`, [C, 4 * C], projStd);
    s.matrix(`${p}.ffn.receptance.weight`, [C, C], std);
  }
  s.constant('ln_out.weight', [C], 1);
  return s;
}

/** The piece of the RWKV-style model that uses parameter `name`. */
export function linearPieceOf(name: string): Piece {
  const block = /^blocks\.(\d+)\./.exec(name);
  if (block) return Number(block[1]);
  return name === 'emb.weight' ? 'tied' : 'head';
}

export class LinearLM extends PieceModel {
  readonly arch = 'linear';
  readonly params: ParamStore;
  readonly nLayer: number;
  private readonly noPositions: Tensor;
  /** (hs) ones: the gain of ln_x's per-head norm, whose learned [C] gain follows it. */
  private readonly unitHead: Tensor;
  private readonly p: (name: string) => Tensor;

  /**
   * With `place`, only this rank's shards of the parameters it holds (nn/params.ts placeSpecs).
   * @throws Error when a size is not a positive integer or heads do not divide the width.
   */
  constructor(readonly gpu: Gpu, readonly cfg: LinearConfig, seed: number, place?: Placement) {
    super();
    checkPositive('linear model', cfg, ['vocabSize', 'blockSize', 'nLayer', 'nHead', 'nEmbd']);
    if (cfg.nEmbd % cfg.nHead !== 0) {
      throw new Error(`linear model: nEmbd (${cfg.nEmbd}) must be divisible by nHead (${cfg.nHead})`);
    }
    this.nLayer = cfg.nLayer;
    const rng = new Random(seed), random = () => rng.normal(), specs = linearParamSpecs(cfg).specs;
    this.params = new ParamStore(gpu, place ? placeSpecs(specs, random, place) : specs, random);
    this.p = (name) => this.params.get(name).value;
    this.noPositions = zeroPositions(gpu, cfg.blockSize, cfg.nEmbd);
    const hs = cfg.nEmbd / cfg.nHead;
    this.unitHead = gpu.upload(new Float32Array(hs).fill(1), [hs], 'f32', 'ln_x.unit');
  }

  /** x (B, T, C) = emb[tokens] (+ NEFTune noise in training passes); the decays carry position. */
  async embed(
    ctx: ModelContext,
    tape: Tape,
    input: ModelInput,
    b: number,
    t: number,
    opts: ForwardOptions,
  ): Promise<Tensor> {
    const tables = { wte: this.p('emb.weight'), positions: this.noPositions, learned: false };
    return await this.embedTokens(ctx, tape, input, tables, b, t, opts); // (B, T, C)
  }

  /**
   * Block i: time mixing, then channel mixing, each a residual branch on x (B·T, C). Over a
   * tensor-parallel context H and C in the shapes below are this rank's heads H/tp and their
   * channels C/tp (the residual stream stays (B·T, C)).
   */
  async block(ctx: ModelContext, tape: Tape, x: Tensor, i: number, b: number, t: number): Promise<Tensor> {
    const { nHead, nEmbd, decay } = this.cfg, p = this.p, hs = nEmbd / nHead, n = `blocks.${i}`;
    const dims = { b, t, h: ctx.local(nHead), dk: hs, dv: hs, scale: 1 / Math.sqrt(hs) }; // this rank's heads
    const lin = (x: Tensor, name: string, label: string, bias = false) =>
      ctx.linear(tape, x, `${n}.${name}`, p(`${n}.${name}.weight`), bias ? p(`${n}.${name}.bias`) : null, label);
    // Decoding carries what a token needs of the past (docs/design.md#decoding-state-of-the-recurrent-layers): the
    // normed row before the pass for each token shift, and the wkv state under the mixer's own label; else null.
    const carry = (label: string, shape: number[]) => ctx.carry?.(label, shape) ?? null;
    const wkvState = carry(`${n}.att.mixer`, [b, dims.h, hs, hs]); // (B, H, K, V)
    // ---- time mixing
    const a = rmsNorm(tape, x, p(`${n}.ln1.weight`), `${n}.ln1`); // (B·T, C)
    // Token t−1's row: across shard edges under sequence parallelism, carried while decoding.
    const shift = async (x: Tensor, label: string) =>
      ctx.shift ? await ctx.shift(tape, x, b, t, label) : tokenShift(tape, x, b, t, label, carry(label, [b, nEmbd]));
    const sa = await shift(a, `${n}.att.shift`); // (B·T, C): token t−1
    const mix = (m: string) => lerp(tape, a, sa, p(`${n}.att.time_maa_${m}`), `${n}.att.maa_${m}`);
    const proj = (x: Tensor, m: string) => lin(x, `att.${m}`, `${n}.att.${m}`);
    const r = await proj(mix('r'), 'receptance'); // (B, T, H·hs)
    const k = await proj(mix('k'), 'key'); // (B, T, H·hs)
    const v = await proj(mix('v'), 'value'); // (B, T, H·hs)
    const dlogit = await lin(mix('w'), 'att.time_decay', `${n}.att.decay`, true); // (B, T, H) or (B, T, C)
    // The mixer core, handed its activations explicitly so the context may re-run it in backward
    // (selective recomputation, docs/design.md#activation-recomputation). It starts from the decay logits, as RWKV-6's
    // wkv kernel does from w: the log-decays are its own, not kept when it is recomputed.
    const o = await ctx.mixer(tape, [r, k, v, dlogit], (tp, [r, k, v, dlogit]) => {
      const logDecay = logSigmoid(tp, dlogit, 1 / GATE_NORM, `${n}.att.logdecay`); // (B, T, H) or (B, T, C), ≤ 0
      return decay === 'head'
        ? linearAttention(tp, r, k, v, logDecay, dims, `${n}.att.la`, wkvState) // (B, T, C)
        : recurrentLinearAttention(tp, r, k, v, logDecay, p(`${n}.att.time_faaaa`), dims, `${n}.att.wkv`, wkvState);
    }, `${n}.att.mixer`);
    // ln_x per head (RWKV's GroupNorm(n_head)): no statistic crosses a head, so none crosses ranks.
    const oh = rmsNorm(tape, o, this.unitHead, `${n}.att.ln_x`); // (B·T·H, hs)
    const on = scaleChannels(tape, oh, p(`${n}.att.ln_x.weight`), `${n}.att.ln_x.gain`); // (B·T, C)
    const gate = silu(tape, await proj(mix('g'), 'gate'), `${n}.att.gate_act`); // (B·T, C)
    x = add(tape, x, await proj(mul(tape, on, gate, `${n}.att.gated`), 'output'), `${n}.res1`);
    // ---- channel mixing
    const m = rmsNorm(tape, x, p(`${n}.ln2.weight`), `${n}.ln2`); // (B·T, C)
    const sm = await shift(m, `${n}.ffn.shift`);
    const fmix = (q: string) => lerp(tape, m, sm, p(`${n}.ffn.time_maa_${q}`), `${n}.ffn.maa_${q}`);
    const kk = reluSquared(tape, await lin(fmix('k'), 'ffn.key', `${n}.ffn.key`), `${n}.ffn.relu2`); // (B·T, 4C)
    const vv = await lin(kk, 'ffn.value', `${n}.ffn.value`); // (B·T, C), summed over tp
    // Replicated under tp: its input and output are the full-width residual-side tensors.
    const rr = sigmoid(tape, await lin(fmix('r'), 'ffn.receptance', `${n}.ffn.receptance`), `${n}.ffn.sigmoid`);
    return add(tape, x, mul(tape, rr, vv, `${n}.ffn.gated`), `${n}.res2`);
  }

  /** RMSNorm and the LM head tied to the embedding. */
  head(ctx: ModelContext, tape: Tape, x: Tensor, input: ModelInput, opts: ForwardOptions): Promise<ForwardResult> {
    const xf = rmsNorm(tape, x, this.p('ln_out.weight'), 'norm_f'); // (B·T, C)
    return Promise.resolve(ctx.head(tape, xf, this.p('emb.weight'), input, opts, realVocabOf(this.cfg)));
  }

  /** Blocks by index; emb at both ends (tied), ln_out with the head. */
  pieceOf(name: string): Piece {
    return linearPieceOf(name);
  }

  numParams(): number {
    return this.params.count;
  }

  /** 6N plus the mixer: per layer and token, state update and readout are 2·C·hs MACs each (×3 for fwd+bwd). */
  flopsPerToken(_t: number): number {
    const { nLayer: L, nEmbd: C, nHead: H } = this.cfg;
    return 6 * this.numParams() + 12 * L * C * (C / H);
  }

  describe(): string {
    const { nLayer, nHead, nEmbd, blockSize, decay } = this.cfg;
    return `linear (RWKV-style, ${decay} decay) · ${nLayer} layers · ${nHead} heads · width ${nEmbd} · block ${blockSize}`;
  }
}
