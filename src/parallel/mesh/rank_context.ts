/**
 * The model context of one rank of a tensor-, sequence- and context-parallel group
 * (src/models/context.ts; docs/design.md#parallel-strategies and docs/design.md#one-model-many-contexts): the same
 * architecture code as the single-rank model, with each op that a split changes replaced here.
 * - linear: the role of `${name}.weight` in tp_table.ts picks Megatron's f before a column-
 *   parallel layer (the sequence-parallel all-gather when its input is the residual stream) and g
 *   after a row-parallel one (the reduce-scatter under sequence parallelism); a row-parallel bias
 *   is added once, after the sum; a replicated weight is the plain layer.
 * - attention: FlashAttention over this rank's nh/tp heads, or ring attention / Ulysses over the
 *   context-parallel group when the rank holds T/cp tokens of every sequence.
 * - embed / head: the vocab-parallel embedding and cross-entropy (vocab_parallel.ts); the
 *   learned positions looked up at this rank's global positions.
 * - shift: RWKV's token shift, with a halo row from the previous rank under sequence parallelism (sp_shift.ts).
 * With tp = 1 and no context parallelism every op is the single-rank one.
 */
import type { Tensor } from '../../gpu/tensor.ts';
import type { Tape } from '../../autograd/tape.ts';
import { add, crossEntropy, embedding, flashAttention, linear, tokenShift } from '../../autograd/ops.ts';
import type { Communicator } from '../../comm/communicator.ts';
import type { FloatCollectives } from '../../comm/compressed.ts';
import type { ParamStore } from '../../nn/params.ts';
import {
  type ContextAttnDims,
  LOCAL,
  type Maybe,
  type ModelContext,
  type ModelInput,
  uploadIds,
} from '../../models/context.ts';
import type { ForwardOptions, ForwardResult } from '../../models/model.ts';
import { subGroup } from '../data/data_parallel.ts';
import type { MoEFn } from '../../models/moe_layer.ts';
import {
  copyToTensorParallelRegion,
  gatherFromSequenceParallelRegion,
  localSequenceRows,
  reduceFromTensorParallelRegion,
  reduceScatterToSequenceParallelRegion,
} from '../tensor/tp_comm.ts';
import {
  vocabParallelCrossEntropy,
  vocabParallelEmbedding,
  type VocabShard,
  vocabShard,
} from '../tensor/vocab_parallel.ts';
import { ringAttention } from '../context/ring_attention.ts';
import { ulyssesAttention } from '../context/ulysses.ts';
import type { CpKind } from '../plan/plan.ts';
import { tpRole } from '../tensor/tp_table.ts';
import { sequenceParallelShift } from '../tensor/sp_shift.ts';
import { RowBiasColumns } from '../tensor/row_bias.ts';

/** Where a rank sits: its tp group (size 1 without tp), sequence parallelism, context parallelism. */
export interface RankContextOptions {
  tp: Communicator;
  /** The tokenizer's vocabulary V: ids ≥ V are padding, masked out of the softmax. */
  vocabSize: number;
  /** The model's embedding rows V' ≥ V (--pad-vocab, models/vocab_pad.ts); default V. */
  modelVocab?: number;
  /** Megatron sequence parallelism (needs tp > 1 and B·T divisible by tp). */
  sequenceParallel?: boolean;
  /** This rank holds the tokens at global `positions` of every sequence; attention runs over `group`. */
  context?: {
    group: FloatCollectives;
    /** The plain communicator under `group` when it is compressed (validation's groups derive from it). */
    comm?: Communicator;
    kind: CpKind;
    positions: Int32Array;
  };
  /** The activations' collectives over tp (default: the tp group's `act` sub-group, uncompressed). */
  act?: FloatCollectives;
}

/** The parallel context of one rank (see the module doc). */
export class RankContext implements ModelContext {
  readonly tp: number;
  readonly sequenceParallel: boolean;
  readonly shard: VocabShard;
  private act: FloatCollectives;
  private ce: Communicator;
  private attnGroup: FloatCollectives | undefined;
  /** The groups {@link withGroups} swaps in, per purpose. */
  private readonly purposeGroups = new Map<string, [Communicator, Communicator, Communicator | undefined]>();
  private readonly biasCols = new RowBiasColumns();
  /**
   * The MoE sub-layer of a MoE model (moe_layer.ts MoEContext): set by stages.ts once the model
   * exists — its experts on this rank, or exchanged over the rank's EP group.
   */
  moe?: MoEFn;

  /** @throws Error for sequence parallelism without tp > 1. */
  constructor(readonly o: RankContextOptions) {
    this.tp = o.tp.size;
    this.sequenceParallel = !!o.sequenceParallel;
    if (this.sequenceParallel && this.tp === 1) throw new Error('sequence parallel requires tp > 1');
    this.shard = vocabShard(o.vocabSize, this.tp, o.tp.rank, o.modelVocab);
    this.act = o.act ?? subGroup(o.tp, 'act');
    this.ce = subGroup(o.tp, 'ce');
    this.attnGroup = o.context?.group;
  }

  /**
   * Runs `fn` with the activations, cross-entropy and attention traffic on `purpose` sub-groups of
   * their groups, uncompressed (validation runs between steps on `eval` groups, so a step's
   * traffic accounting never sees it), then restores the training groups.
   */
  async withGroups<T>(purpose: string, fn: () => Promise<T>): Promise<T> {
    const saved = [this.act, this.ce, this.attnGroup] as const;
    let groups = this.purposeGroups.get(purpose);
    if (!groups) {
      const cx = this.o.context;
      groups = [
        subGroup(this.o.tp, `act/${purpose}`),
        subGroup(this.o.tp, `ce/${purpose}`),
        cx && subGroup(cx.comm ?? (cx.group as Communicator), purpose),
      ];
      this.purposeGroups.set(purpose, groups); // made once: every evaluation runs on the same groups
    }
    [this.act, this.ce, this.attnGroup] = groups;
    try {
      return await fn();
    } finally {
      [this.act, this.ce, this.attnGroup] = saved;
    }
  }

  /** Whether every op is the single-rank one. */
  private get plain(): boolean {
    return this.tp === 1 && !this.o.context;
  }

  /** The store's value → gradient map for tapes, plus the row-parallel biases' (C, 1) views (row_bias.ts). */
  gradMap(store: ParamStore): Map<Tensor, Tensor> {
    return this.biasCols.gradMap(store, this.tp);
  }

  /** The bias columns {@link gradMap} made, each mapped to the bias value it stands for (buckets.ts BucketFinality). */
  biasAliases(): Map<Tensor, Tensor> {
    return this.biasCols.aliases();
  }

  /** Shape (B·T, C), or (B·T/tp, C) under sequence parallelism, of the residual stream. */
  actShape(b: number, t: number, c: number): number[] {
    return [this.sequenceParallel ? (b * t) / this.tp : b * t, c];
  }

  local(width: number): number {
    return width / this.tp;
  }

  async linear(tape: Tape, x: Tensor, name: string, w: Tensor, b: Tensor | null, label: string): Promise<Tensor> {
    if (this.tp === 1) return linear(tape, x, w, b, label);
    const role = tpRole(`${name}.weight`);
    // The plain layer: after a row-inner layer (its backward already sums), or a whole weight on
    // every rank (RWKV's channel-mix receptance: replicated in and out, so an f would sum tp equal
    // input gradients).
    if (role === 'column-inner' || role === 'channel' || role === 'replicated') return linear(tape, x, w, b, label);
    if (role !== 'row' && role !== 'row-inner') {
      // Column-parallel: f (or the SP all-gather) on the input; the bias is sharded with the rows.
      const xin = this.sequenceParallel
        ? await gatherFromSequenceParallelRegion(tape, x, this.act)
        : await copyToTensorParallelRegion(tape, x, this.act);
      return linear(tape, xin, w, b, label);
    }
    const part = linear(tape, x, w, null, label);
    if (role === 'row-inner') {
      // g, then f: the summed output feeds ops split by channel, whose input gradients are partial.
      if (b) {
        throw new Error(
          `tensor parallel: '${name}' is row-parallel inside a block and has a bias; tp_table.ts has no rule for it`,
        );
      }
      return await copyToTensorParallelRegion(
        tape,
        await reduceFromTensorParallelRegion(tape, part, this.act),
        this.act,
      );
    }
    const y = this.sequenceParallel
      ? await reduceScatterToSequenceParallelRegion(tape, part, this.act)
      : await reduceFromTensorParallelRegion(tape, part, this.act);
    if (!b) return y;
    const col = this.biasCols.get(b);
    if (!col) {
      throw new Error(
        `tensor parallel: bias of '${name}' has no column view; build the tape's gradients with RankContext.gradMap`,
      );
    }
    const rows = y.size / y.shape[y.shape.length - 1];
    const ones = tape.gpu.upload(new Float32Array(rows).fill(1), [rows, 1], 'f32', 'tp.ones');
    tape.onDispose(() => ones.release());
    return add(tape, y, linear(tape, ones, col, null, `${label}.bias`), `${label}.biased`);
  }

  async attention(tape: Tape, qkv: Tensor, dims: ContextAttnDims, label: string, naive?: boolean): Promise<Tensor> {
    if (this.plain) return LOCAL.attention(tape, qkv, dims, label, naive);
    const local = { b: dims.b, t: dims.t, c: dims.c / this.tp, nh: dims.nh / this.tp }, cx = this.o.context;
    if (!cx) return flashAttention(tape, qkv, local, label); // (B, T, C/tp): this rank's heads
    const ring = { ...local, causal: true };
    return cx.kind === 'ring'
      ? await ringAttention(tape, qkv, ring, this.attnGroup!, label)
      : await ulyssesAttention(tape, qkv, ring, this.attnGroup!, label);
  }

  /**
   * RWKV's token shift of x (B·T, C): under sequence parallelism this rank's rows need the row
   * before their first from the previous rank (sp_shift.ts); otherwise every rank holds all rows.
   */
  shift(tape: Tape, x: Tensor, b: number, t: number, label: string): Maybe<Tensor> {
    if (!this.sequenceParallel) return tokenShift(tape, x, b, t, label);
    return sequenceParallelShift(tape, x, b, t, this.act, label);
  }

  /** A recurrent mixer core runs on this rank's own channels / heads: nothing crosses ranks. */
  mixer: ModelContext['mixer'] = (tape, inputs, core) => core(tape, inputs);

  async embed(
    tape: Tape,
    input: ModelInput,
    wte: Tensor,
    positions: Tensor,
    learned: boolean,
    b: number,
    t: number,
  ): Promise<Tensor> {
    if (this.plain) return LOCAL.embed(tape, input, wte, positions, learned, b, t);
    const n = b * t, c = wte.shape[1];
    if (this.sequenceParallel && n % this.tp) {
      throw new Error(`sequence parallel: B·T = ${n} rows not divisible by tp ${this.tp}`);
    }
    // The embedding op always adds a row-indexed (T, C) table: a frozen zero one stands in.
    const zero = this.tp === 1 || learned ? tape.gpu.zeros([t, c], 'f32', 'emb.zero') : null;
    if (zero) tape.onDispose(() => zero.release());
    const tok = this.tp > 1
      ? await vocabParallelEmbedding(
        tape,
        wte,
        input.hostTokens,
        this.shard,
        this.o.vocabSize,
        this.act,
        b,
        t,
        this.sequenceParallel,
      )
      : embedding(tape, uploadIds(tape, input.hostTokens, [b, t], 'cp.tokens'), input.hostTokens, wte, zero!, b, t);
    if (!learned) return tok;
    // wpe at this rank's global positions, looked up as a token table indexed by position.
    const at = this.o.context?.positions ?? Int32Array.from({ length: t }, (_, i) => i);
    if (at.length !== t) throw new Error(`context parallel: ${at.length} positions for ${t} tokens per row`);
    const host = Int32Array.from({ length: n }, (_, i) => at[i % t]);
    const pos = embedding(tape, uploadIds(tape, host, [b, t], 'pos.ids'), host, positions, zero!, b, t); // (B·T, C)
    return add(tape, tok, this.sequenceParallel ? await localSequenceRows(tape, pos, this.act) : pos, 'emb');
  }

  /** See ModelContext.head; `vocab` is the model's real V, which this rank's shard already knows. */
  async head(
    tape: Tape,
    xf: Tensor,
    wte: Tensor,
    input: ModelInput,
    opts: ForwardOptions,
    vocab: number,
  ): Promise<ForwardResult> {
    if (vocab !== this.o.vocabSize) {
      throw new Error(`RankContext.head: the model's vocabulary ${vocab} ≠ the rank's ${this.o.vocabSize}`);
    }
    if (this.plain) return LOCAL.head(tape, xf, wte, input, opts, vocab);
    const gradScale = opts.gradScale ?? 1;
    if (this.tp === 1) {
      const logits = linear(tape, xf, wte, null, 'lm_head');
      if (!input.hostTargets) return { logits, loss: null };
      return {
        logits,
        loss: crossEntropy(
          tape,
          logits,
          uploadIds(tape, input.hostTargets, [input.hostTargets.length], 'cp.targets'),
          gradScale,
          vocab,
        ),
      };
    }
    const x = this.sequenceParallel
      ? await gatherFromSequenceParallelRegion(tape, xf, this.act)
      : await copyToTensorParallelRegion(tape, xf, this.act);
    const logits = linear(tape, x, wte, null, 'lm_head'); // (N, V_p/tp): this rank's vocabulary columns
    if (!input.hostTargets) return { logits, loss: null };
    const { loss } = await vocabParallelCrossEntropy(
      tape,
      logits,
      input.hostTargets,
      this.shard,
      this.o.vocabSize,
      this.ce,
      gradScale,
    );
    return { logits, loss };
  }
}
