/**
 * The parallel context a model runs its pieces over (docs/design.md#one-model-many-contexts). Every architecture
 * is written once as embed → block(i) → head; the ops whose meaning changes when the model is
 * split over ranks go through this interface instead of calling the autograd ops directly:
 * - `linear`: plain, or column- / row-parallel with Megatron's f / g operators, the role looked
 *   up by parameter name in one table (src/parallel/tensor/tp_table.ts);
 * - `attention`: FlashAttention (or the T×T kernel) over this rank's heads, or ring attention /
 *   Ulysses over a context-parallel group;
 * - `mixer`: a recurrent layer's sequence-mixer core (Mamba's scan, the linear attention), run
 *   as given everywhere; it goes through the context so that selective recomputation
 *   (src/models/recompute.ts) can re-run it in backward, as it does the attention core;
 * - `embed` / `head`: the token embedding and the tied LM head with its cross-entropy, or their
 *   vocab-parallel forms;
 * - `carry` (decoding only): the buffer a recurrent layer keeps its state in between passes;
 * - `shift`: RWKV's token shift, which under sequence parallelism reads across shard edges.
 * The single-rank model runs over {@link LOCAL}, which calls the plain ops and never awaits
 * anything but resolved promises. src/parallel/mesh/rank_context.ts supplies the split forms.
 */
import type { Tensor } from '../gpu/tensor.ts';
import type { Tape } from '../autograd/tape.ts';
import { attention, embedding, flashAttention, linear } from '../autograd/ops.ts';
import type { ForwardOptions, ForwardResult } from './model.ts';
import { lmHeadLoss } from './head.ts';

/** What one forward pass reads: token ids and targets on the host, and on the GPU when a trainer already wrote them. */
export interface ModelInput {
  /** (B·T) token ids. */
  hostTokens: Int32Array;
  /** (B, T) i32 on the GPU, or null (the context uploads hostTokens). */
  tokens: Tensor | null;
  /** (B·T) i32 on the GPU (ids < 0 are ignored), or null without targets. */
  targets: Tensor | null;
  /** (B·T) host ids of the targets, or null (needed by the vocab-parallel loss). */
  hostTargets: Int32Array | null;
}

/** Attention shape: batch b, tokens t on this rank, width c, heads nh (whole-model numbers). */
export interface ContextAttnDims {
  b: number;
  t: number;
  c: number;
  nh: number;
}

/** A value or a promise of it: collectives make the split forms asynchronous. */
export type Maybe<T> = T | Promise<T>;

/**
 * A sequence-mixer core on `tape` over its activations `inputs` (in the order the layer passes
 * them). It may read parameters directly, but every activation it reads must be in `inputs`:
 * a recomputed core's gradients reach only those.
 */
export type MixerCore = (tape: Tape, inputs: readonly Tensor[]) => Tensor;

/** The ops a model's pieces run through (see the module doc). */
export interface ModelContext {
  /**
   * y (N, out) = x · Wᵀ + b for the layer whose parameters are `${name}.weight` / `.bias`.
   * @param x (N, in) — or this rank's slice of it when the layer is row-parallel.
   */
  linear(tape: Tape, x: Tensor, name: string, w: Tensor, b: Tensor | null, label: string): Maybe<Tensor>;
  /**
   * Causal multi-head attention of qkv (N, 3·C_local) = [q | k | v] → (B, T, C_local): this rank's
   * heads of this rank's tokens. `naive` selects the T×T kernel (single rank only).
   */
  attention(tape: Tape, qkv: Tensor, dims: ContextAttnDims, label: string, naive?: boolean): Maybe<Tensor>;
  /**
   * `core(tape, inputs)`: a recurrent layer's sequence mixer over this rank's channels / heads,
   * which needs no communication under any split.
   */
  mixer(tape: Tape, inputs: readonly Tensor[], core: MixerCore, label: string): Maybe<Tensor>;
  /**
   * x (B·T, C) = wte[tokens] + positions[pos] where pos are the global positions of this rank's
   * tokens: the learned table wpe (`learned`), or a frozen zero table for models without one.
   */
  embed(
    tape: Tape,
    input: ModelInput,
    wte: Tensor,
    positions: Tensor,
    learned: boolean,
    b: number,
    t: number,
  ): Maybe<Tensor>;
  /**
   * The tied LM head on the final hidden states xf (N, C): logits (N, V) and, with targets, the
   * mean cross-entropy loss (2) = [mean, count] with its gradient seeded by `opts.gradScale`.
   * `vocab` is the real vocabulary V ≤ wte rows: logits columns ≥ V (--pad-vocab padding) are
   * left out of the softmax, as the vocab-parallel cross-entropy leaves out the tp padding.
   */
  head(
    tape: Tape,
    xf: Tensor,
    wte: Tensor,
    input: ModelInput,
    opts: ForwardOptions,
    vocab: number,
  ): Maybe<ForwardResult>;
  /** The widths that a split divides: C·`parts` → this rank's share (heads, inner channels). */
  local(width: number): number;
  /**
   * Decoding with a cache (kv_cache.ts, docs/design.md#decoding-state-of-the-recurrent-layers): the buffer of `shape`
   * that carries the recurrent state named `label` (Mamba's conv window, its scan state; the linear attention's
   * token-shift rows, its wkv state) from one pass to the next, zeroed before the first. Absent or null: every pass
   * starts from a zero state, as training and full forwards do. A context that gives one runs a recurrent mixer only
   * when its layer asked for the state under the mixer's own label.
   */
  carry?(label: string, shape: number[]): Tensor | null;
  /**
   * RWKV's token shift of x (B·T, C) → (B·T, C), row i taking row i − 1 within each sequence,
   * where the rows x holds are not the whole sequence: under sequence parallelism a rank's shard
   * needs the row before its first from the previous rank (src/parallel/tensor/sp_shift.ts). Absent: the
   * plain shift (autograd/ops.ts tokenShift) on all B·T rows.
   */
  shift?(tape: Tape, x: Tensor, b: number, t: number, label: string): Maybe<Tensor>;
}

/** The identity context: the single-rank model. */
export const LOCAL: ModelContext = {
  linear: (tape, x, _name, w, b, label) => linear(tape, x, w, b, label),
  attention: (tape, qkv, dims, label, naive) =>
    tape.topk !== null
      ? attention(tape, qkv, { ...dims, topk: tape.topk }, label)
      : (naive ? attention : flashAttention)(tape, qkv, dims, label),
  mixer: (tape, inputs, core) => core(tape, inputs),
  embed(tape, input, wte, positions, _learned, b, t) {
    const tokens = input.tokens ?? uploadIds(tape, input.hostTokens, [b, t], 'tokens');
    return embedding(tape, tokens, input.hostTokens, wte, positions, b, t); // (B, T, C)
  },
  head(tape, xf, wte, input, opts, vocab) {
    // Weight tied to wte; with targets the head runs in row chunks when (B·T, V) exceeds a binding.
    const targets = input.targets ??
      (input.hostTargets ? uploadIds(tape, input.hostTargets, [input.hostTargets.length], 'targets') : null);
    if (targets) return lmHeadLoss(tape, xf, wte, targets, opts.gradScale ?? 1, vocab);
    return { logits: linear(tape, xf, wte, null, 'lm_head'), loss: null }; // (B·T, V)
  },
  local: (width) => width,
};

/** Host ids on the GPU for one pass, released with the tape. */
export function uploadIds(tape: Tape, ids: Int32Array, shape: number[], label: string): Tensor {
  const t = tape.gpu.upload(ids, shape, 'i32', label);
  tape.onDispose(() => t.release());
  return t;
}

/** Input of a pass whose ids are on the GPU already (the single-rank trainer, evaluation, sampling). */
export function gpuInput(tokens: Tensor, hostTokens: Int32Array, targets: Tensor | null): ModelInput {
  return { tokens, hostTokens, targets, hostTargets: null };
}
