/**
 * What every architecture exposes to the trainer, the CLI and the workers: its parameters,
 * a forward pass on the autograd tape, and the counts that progress lines and MFU need.
 */
import type { Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { applyNeftune } from '../kernels/noise.ts';
import type { Tape } from '../autograd/tape.ts';
import type { ParamStore } from '../nn/params.ts';
import { gpuInput, LOCAL, type ModelContext, type ModelInput } from './context.ts';
import { type Recompute, recomputeContext, runBlock } from './recompute.ts';

/**
 * What one forward pass returns; `loss` (2) = [mean loss, counted targets] when targets were given.
 * `logits` (B·T, V) is always present without targets; with targets it is null when the head ran
 * in row chunks because (B·T, V) exceeds a storage binding (head.ts lmHeadLoss).
 */
export interface ForwardResult {
  logits: Tensor | null; // (B·T, V)
  loss: Tensor | null;
}

/**
 * The logits of a forward pass made without targets (sampling, greedy decoding).
 * @throws Error when they are null (a forward with targets whose head ran in row chunks).
 */
export function logitsOf(r: ForwardResult, what: string): Tensor {
  if (!r.logits) {
    throw new Error(
      `${what}: the forward pass returned no logits (a chunked LM head with targets); call forward with targets = null to get logits`,
    );
  }
  return r.logits;
}

/** Per-call options of a forward pass; all default to off. */
export interface ForwardOptions {
  /** Multiplies the loss gradient (1/micro-batches under gradient accumulation). Default 1. */
  gradScale?: number;
  /**
   * NEFTune (Jain et al., arXiv 2310.05914): uniform noise of scale α/√(T·C) added to the input
   * embeddings; training forward passes only. `seed` makes the noise reproducible per step, `row`
   * (default 0) is the global row of this micro-batch's first row (kernels/noise.ts applyNeftune).
   */
  neftune?: { alpha: number; seed: number; row?: number };
  /** Activation recomputation of the blocks (recompute.ts); training passes only. Default none. */
  recompute?: Recompute;
  /**
   * Awaited before block i's forward: ZeRO-3 (src/parallel/zero/zero_units.ts) gathers that layer's
   * weights here, so the host and the device hold one gathered layer at a time.
   */
  beforeBlock?: (i: number) => Promise<void>;
}

/** Vocabulary and context every model has, whatever its mixer. */
export interface ModelShape {
  /** Rows of the token embedding / columns of the logits: the tokenizer's V, or V padded by --pad-vocab. */
  vocabSize: number;
  blockSize: number;
  /**
   * The tokenizer's vocabulary V when `vocabSize` is padded (--pad-vocab, models/vocab_pad.ts):
   * ids ≥ V never occur in data, their logits are left out of the softmax and never sampled.
   * Absent = no padding.
   */
  realVocab?: number;
}

/** The real vocabulary V of a model shape: ids below it are tokens, the rest padding. */
export const realVocabOf = (shape: ModelShape): number => shape.realVocab ?? shape.vocabSize;

/** A trainable language model over token ids. */
export interface LanguageModel {
  readonly params: ParamStore;
  readonly cfg: ModelShape;
  /** Architecture name (`--arch`). */
  readonly arch: string;
  /**
   * tokens (B, T) i32 on the GPU and the same ids on the host; targets (B, T) i32 or null.
   * Returns logits (B·T, V) and, with targets, the loss (2) = [mean, count] on the GPU; with
   * targets the logits are null when the LM head ran in row chunks (see {@link ForwardResult}).
   * @throws Error when T exceeds the block size.
   */
  forward(
    tape: Tape,
    tokens: Tensor,
    hostTokens: Int32Array,
    targets: Tensor | null,
    b: number,
    t: number,
    opts?: ForwardOptions,
  ): Promise<ForwardResult>;
  /** Parameter count without positional tables (nanoGPT's get_num_params convention). */
  numParams(): number;
  /** Training FLOPs per token (forward + backward) at sequence length t. */
  flopsPerToken(t: number): number;
  /** One line describing the shape, for progress output. */
  describe(): string;
}

/** Which piece of the forward uses a parameter: block i, the embedding, the head, both ends (a tied embedding) or several blocks (a hybrid's shared block). */
export type Piece = number | 'embed' | 'head' | 'tied' | 'shared';

/**
 * A model written once as pieces over a {@link ModelContext} (docs/design.md#one-model-many-contexts): the
 * single-rank forward runs them over LOCAL; a pipeline stage runs its range of blocks; a
 * tensor- or context-parallel rank runs them over its rank context.
 */
export interface LayeredModel extends LanguageModel {
  /** Blocks, the unit a pipeline stage holds. */
  readonly nLayer: number;
  /** The residual stream (B·T, C) (or this rank's share of it) from the input ids. */
  embed(ctx: ModelContext, tape: Tape, input: ModelInput, b: number, t: number, opts: ForwardOptions): Promise<Tensor>;
  /** Block i on the residual stream x; returns the new residual stream. */
  block(ctx: ModelContext, tape: Tape, x: Tensor, i: number, b: number, t: number): Promise<Tensor>;
  /** Final norm, tied LM head and, with targets, the loss. */
  head(ctx: ModelContext, tape: Tape, x: Tensor, input: ModelInput, opts: ForwardOptions): Promise<ForwardResult>;
  /** The piece that uses parameter `name` (drives the pipeline's parameter placement). */
  pieceOf(name: string): Piece;
}

/**
 * embed → every block → head over `ctx`: the whole forward of a layered model.
 * @throws Error when T exceeds the block size (from the embedding) or a piece's own check.
 */
export async function runPieces(
  m: LayeredModel,
  ctx: ModelContext,
  tape: Tape,
  input: ModelInput,
  b: number,
  t: number,
  opts: ForwardOptions = {},
): Promise<ForwardResult> {
  const mode = opts.recompute ?? 'none', inner = recomputeContext(ctx, mode);
  let x = await m.embed(ctx, tape, input, b, t, opts);
  for (let i = 0; i < m.nLayer; i++) {
    await opts.beforeBlock?.(i);
    x = await runBlock(m, inner, tape, x, i, b, t, mode);
  }
  return await m.head(ctx, tape, x, input, opts);
}

/** {@link LanguageModel.forward} of a layered model: its pieces over the identity context. */
export function localForward(
  m: LayeredModel,
  tape: Tape,
  tokens: Tensor,
  hostTokens: Int32Array,
  targets: Tensor | null,
  b: number,
  t: number,
  opts: ForwardOptions = {},
): Promise<ForwardResult> {
  return runPieces(m, LOCAL, tape, gpuInput(tokens, hostTokens, targets), b, t, opts);
}

/**
 * What every layered model shares, so each architecture writes only its pieces: the single-rank
 * forward is the pieces over LOCAL, and the embedding piece is the context's lookup plus NEFTune
 * noise in training passes.
 */
export abstract class PieceModel implements LayeredModel {
  abstract readonly arch: string;
  abstract readonly params: ParamStore;
  abstract readonly cfg: ModelShape & { nEmbd: number };
  abstract readonly nLayer: number;
  abstract readonly gpu: Gpu;

  /** See {@link LanguageModel.forward}. */
  forward(
    tape: Tape,
    tokens: Tensor,
    hostTokens: Int32Array,
    targets: Tensor | null,
    b: number,
    t: number,
    opts: ForwardOptions = {},
  ): Promise<ForwardResult> {
    return localForward(this, tape, tokens, hostTokens, targets, b, t, opts);
  }

  /**
   * x (B, T, C) = wte[tokens] + positions (the learned table, or a frozen zero one), plus NEFTune
   * noise, added in place: the embedding's backward does not read x.
   */
  protected async embedTokens(
    ctx: ModelContext,
    tape: Tape,
    input: ModelInput,
    tables: { wte: Tensor; positions: Tensor; learned: boolean },
    b: number,
    t: number,
    opts: ForwardOptions,
  ): Promise<Tensor> {
    const x = await ctx.embed(tape, input, tables.wte, tables.positions, tables.learned, b, t); // (B, T, C)
    applyNeftune(this.gpu, x, b, t, this.cfg.nEmbd, opts.neftune);
    return x;
  }

  abstract embed(
    ctx: ModelContext,
    tape: Tape,
    input: ModelInput,
    b: number,
    t: number,
    opts: ForwardOptions,
  ): Promise<Tensor>;
  abstract block(ctx: ModelContext, tape: Tape, x: Tensor, i: number, b: number, t: number): Promise<Tensor>;
  abstract head(
    ctx: ModelContext,
    tape: Tape,
    x: Tensor,
    input: ModelInput,
    opts: ForwardOptions,
  ): Promise<ForwardResult>;
  abstract pieceOf(name: string): Piece;
  abstract numParams(): number;
  abstract flopsPerToken(t: number): number;
  abstract describe(): string;
}
