/**
 * Megatron tensor parallelism (Shoeybi et al., arXiv 1909.08053; picotron tensor_parallel.py)
 * for the GPT of src/models/gpt.ts, with the sequence-parallel variant of sequence_parallel.ts
 * behind `sequenceParallel`. Rank r of p holds its shard under gpt.ts's parameter names:
 * - c_attn (3C × C) column-parallel by heads: rows [r·C/p, (r+1)·C/p) of each of the q, k and
 *   v blocks, so the local (N, 3C/p) output is again [q | k | v] for nHead/p heads;
 * - attn.c_proj (C × C) and mlp.c_proj (C × 4C) row-parallel: columns /p, bias replicated and
 *   added once after the reduction; mlp.c_fc (4C × C) column-parallel: rows /p;
 * - wte vocab-parallel over V padded to a multiple of p (vocab_parallel.ts), tied to the head;
 * - wpe and the LayerNorms replicated.
 * Per layer and micro-batch: 2 allReduces of (B·T, C) forward (after the row-parallel layers)
 * and 2 backward (f before the column-parallel ones); the embedding 1 forward, the head input
 * 1 backward, the cross-entropy 3 of B·T values. Without sequence parallelism replicated
 * parameters get identical gradients on every rank (their inputs and output gradients are
 * allReduce results), so they stay in sync without communication.
 *
 * The step driver is tp_trainer.ts.
 */
import type { Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { Tape } from '../autograd/tape.ts';
import { add, embedding, flashAttention, gelu, layerNorm, linear } from '../autograd/ops.ts';
import type { Communicator } from '../dist/communicator.ts';
import { gptParamSpecs, type GPTConfig, validateGPTConfig } from '../models/gpt.ts';
import { type ParamSpec, ParamStore } from '../nn/params.ts';
import type { TrainConfig } from '../train/config.ts';
import { subGroup } from './data_parallel.ts';
import { copyToTensorParallelRegion, gatherFromSequenceParallelRegion, localSequenceRows, reduceFromTensorParallelRegion, reduceScatterToSequenceParallelRegion } from './tp_comm.ts';
import { type VocabShard, vocabParallelCrossEntropy, vocabParallelEmbedding, vocabShard } from './vocab_parallel.ts';
import type { CpKind } from './plan.ts';
import { ringAttention } from './ring_attention.ts';
import { ulyssesAttention } from './ulysses.ts';
import { shardKind, shardParam, shardShape } from './tp_shard.ts';

export { shardKind, shardParam, shardShape, type ShardKind, tpParamSpecs, unshardParam } from './tp_shard.ts';

/** The gpt.ts config the registry builds from a training config (src/models/registry.ts). */
export function gptConfigOf(cfg: TrainConfig, vocabSize: number): GPTConfig {
  const { blockSize, nLayer, nHead, nEmbd, bias, attention } = cfg;
  return { vocabSize, blockSize, nLayer, nHead, nEmbd, bias, attention };
}


export interface TensorParallelOptions {
  /** Megatron sequence parallelism (sequence_parallel.ts); needs B·T divisible by tp. */
  sequenceParallel?: boolean;
  /**
   * The parameters this rank holds, from gpt.ts's full list (default: all). A pipeline stage
   * passes pipeline_stage.ts `selectStageParams(...).specs`: its blocks, the embedding on the
   * first stage, ln_f (+ the head's wte copy) on the last.
   */
  select?: (all: ParamSpec[]) => ParamSpec[];
  /**
   * Context parallelism inside the blocks (context_parallel.ts): this rank holds the tokens at
   * global `positions` (T/cp of each sequence) and attention runs as ring attention or Ulysses
   * over `group` (the cp group) on this tp rank's heads.
   */
  context?: { group: Communicator; kind: CpKind; positions: Int32Array };
}

/**
 * One tensor-parallel rank of the GPT: the rank's shard of every parameter it holds and the
 * forward, as pieces a pipeline stage can call ({@link embed}, {@link block}, {@link head})
 * and as the whole model ({@link forward}).
 */
export class TensorParallelGPT {
  readonly params: ParamStore;
  readonly shard: VocabShard;
  readonly tp: number;
  readonly sequenceParallel: boolean;
  /** Parameter values → gradients for the tape, including the row-parallel biases' (C, 1) views. */
  readonly gradMap: Map<Tensor, Tensor>;
  private readonly act: Communicator;
  private readonly ce: Communicator;
  private readonly biasCols = new Map<string, Tensor>();
  private readonly context: TensorParallelOptions['context'];

  /**
   * @param full the full model's weights by name (e.g. {@link fullWeights}); this rank keeps its shard.
   * @param group the tensor-parallel group; its rank selects the shard.
   * @throws Error when heads or width do not split over the group, or a weight is missing or mis-sized.
   */
  constructor(readonly gpu: Gpu, readonly cfg: GPTConfig, full: ReadonlyMap<string, Float32Array>, readonly group: Communicator, opts: TensorParallelOptions = {}) {
    validateGPTConfig(cfg);
    const tp = this.tp = group.size;
    if (cfg.nHead % tp) throw new Error(`tensor parallel: heads ${cfg.nHead} not divisible by tp ${tp}`);
    this.sequenceParallel = !!opts.sequenceParallel;
    if (this.sequenceParallel && tp === 1) throw new Error('sequence parallel requires tp > 1');
    this.shard = vocabShard(cfg.vocabSize, tp, group.rank);
    this.context = opts.context;
    const all = gptParamSpecs(cfg);
    const specs = (opts.select ? opts.select(all) : all).map((s): ParamSpec => {
      const w = full.get(s.name), size = s.shape.reduce((a, b) => a * b, 1);
      if (!w || w.length !== size) throw new Error(`tensor parallel: weight '${s.name}' ${w ? `has ${w.length} elements, needs ${size}` : 'is missing'}`);
      const kind = shardKind(s.name), local = shardParam(kind, w, s.shape, tp, group.rank);
      return { ...s, shape: shardShape(kind, s.shape, tp), init: { kind: 'values', at: (j) => local[j] } };
    });
    this.params = new ParamStore(gpu, specs, () => 0);
    this.gradMap = this.params.gradMap();
    for (const p of this.params.params) {
      if (!/\.c_proj\.bias$/.test(p.name) || this.biasCols.has(p.name)) continue;
      const col = p.value.view([p.size, 1]); // a bias (C) as the weight of a 1-input linear: y = 1·bᵀ
      this.biasCols.set(p.name, col);
      this.gradMap.set(col, p.grad.view([p.size, 1]));
    }
    this.act = subGroup(group, 'act');
    this.ce = subGroup(group, 'ce');
  }

  /** Rows per rank of (B·T, C) activations in the replicated / sequence-parallel regions. */
  private localRows(n: number): number {
    return this.sequenceParallel ? n / this.tp : n;
  }

  /** Shape (B·T, C), or (B·T/tp, C) under SP, of the residual stream between blocks (and pipeline stages). */
  actShape(b: number, t: number): number[] {
    return [this.localRows(b * t), this.cfg.nEmbd];
  }

  private p(name: string): Tensor {
    return this.params.get(name).value;
  }

  private pb(name: string): Tensor | null {
    return this.cfg.bias ? this.p(name) : null;
  }

  /** Row-parallel output: partial (N, C) → sum (allReduce, or reduce-scatter to the SP rows) → + bias once. */
  private async rowOut(tape: Tape, x: Tensor, name: string, n: number): Promise<Tensor> {
    const part = linear(tape, x, this.p(`${name}.weight`), null, name);
    // tp 1 (a pipeline or data-parallel mesh without tp): the collectives are identities; skip their read-backs.
    const y = this.tp === 1 ? part : this.sequenceParallel ? await reduceScatterToSequenceParallelRegion(tape, part, this.act) : await reduceFromTensorParallelRegion(tape, part, this.act);
    const col = this.biasCols.get(`${name}.bias`);
    if (!col) return y;
    const rows = this.localRows(n), ones = this.gpu.upload(new Float32Array(rows).fill(1), [rows, 1], 'f32', 'tp.ones');
    tape.onDispose(() => ones.release());
    return add(tape, y, linear(tape, ones, col, null, `${name}.bias`), `${name}.biased`);
  }

  /** Column-parallel input: f (identity / allReduce of the gradient), or the SP all-gather. */
  private colIn(tape: Tape, x: Tensor): Promise<Tensor> {
    if (this.tp === 1) return Promise.resolve(x);
    return this.sequenceParallel ? gatherFromSequenceParallelRegion(tape, x, this.act) : copyToTensorParallelRegion(tape, x, this.act);
  }

  /**
   * The embedding: vocab-parallel wte[tokens] + wpe[0:T] → (B·T, C), or this rank's rows under SP.
   * @param tokens (B·T) host ids, the same on every rank of the group.
   * @throws Error for a bad batch shape (B·T not divisible by tp under SP) or token.
   */
  async embed(tape: Tape, tokens: Int32Array, b: number, t: number): Promise<Tensor> {
    const n = b * t;
    if (this.sequenceParallel && n % this.tp) throw new Error(`sequence parallel: B·T = ${n} rows do not split over tp ${this.tp}`);
    const x = await vocabParallelEmbedding(tape, this.p('transformer.wte.weight'), tokens, this.shard, this.cfg.vocabSize, this.act, b, t, this.sequenceParallel);
    return add(tape, x, await this.positions(tape, this.p('transformer.wpe.weight'), b, t), 'emb');
  }

  /** Block `i` on the residual stream x ({@link actShape}); returns the new residual stream. */
  async block(tape: Tape, x: Tensor, i: number, b: number, t: number): Promise<Tensor> {
    const { nHead, nEmbd: c } = this.cfg, n = b * t, h = `transformer.h.${i}`, p = (k: string) => this.p(k), pb = (k: string) => this.pb(k);
    const a = await this.colIn(tape, layerNorm(tape, x, p(`${h}.ln_1.weight`), p(`${h}.ln_1.bias`), `${h}.ln_1`));
    const qkv = linear(tape, a, p(`${h}.attn.c_attn.weight`), pb(`${h}.attn.c_attn.bias`), `${h}.c_attn`); // (N, 3C/p)
    const dims = { b, t, c: c / this.tp, nh: nHead / this.tp }, cx = this.context;
    // (B, T, C/p): this rank's heads (over its T/cp tokens under context parallelism).
    const y = !cx ? flashAttention(tape, qkv, dims, `${h}.attn`) : cx.kind === 'ring'
      ? await ringAttention(tape, qkv, { ...dims, causal: true }, cx.group, `${h}.attn`)
      : await ulyssesAttention(tape, qkv, { ...dims, causal: true }, cx.group, `${h}.attn`);
    x = add(tape, x, await this.rowOut(tape, y, `${h}.attn.c_proj`, n), `${h}.res1`);
    const m = await this.colIn(tape, layerNorm(tape, x, p(`${h}.ln_2.weight`), p(`${h}.ln_2.bias`), `${h}.ln_2`));
    const up = gelu(tape, linear(tape, m, p(`${h}.mlp.c_fc.weight`), pb(`${h}.mlp.c_fc.bias`), `${h}.c_fc`), `${h}.gelu`); // (N, 4C/p)
    return add(tape, x, await this.rowOut(tape, up, `${h}.mlp.c_proj`, n), `${h}.res2`);
  }

  /**
   * ln_f, the LM head tied to the vocab-parallel wte → this rank's logits (N, V_p/p), and with
   * targets (N host ids) the vocab-parallel mean loss (2) and its value.
   */
  async head(tape: Tape, x: Tensor, targets: Int32Array | null, gradScale = 1): Promise<{ logits: Tensor; loss: Tensor | null; lossValue: number }> {
    const xf = await this.colIn(tape, layerNorm(tape, x, this.p('transformer.ln_f.weight'), this.p('transformer.ln_f.bias'), 'ln_f'));
    const logits = linear(tape, xf, this.p('transformer.wte.weight'), null, 'lm_head');
    if (!targets) return { logits, loss: null, lossValue: NaN };
    const { loss, value } = await vocabParallelCrossEntropy(tape, logits, targets, this.shard, this.cfg.vocabSize, this.ce, gradScale);
    return { logits, loss, lossValue: value };
  }

  /**
   * The forward of gpt.ts on this rank's shard: tokens and targets (B·T) are the whole micro-batch
   * (host ids; every rank of the group passes the same). Returns this rank's logits (B·T, V_p/p)
   * and, with targets, the mean loss (2) and its value. Collectives make it asynchronous.
   * @throws Error for a bad batch shape (B·T not divisible by tp under sequence parallelism) or token.
   */
  async forward(tape: Tape, tokens: Int32Array, targets: Int32Array | null, b: number, t: number, opts: { gradScale?: number } = {}): Promise<{ logits: Tensor; loss: Tensor | null; lossValue: number }> {
    let x = await this.embed(tape, tokens, b, t);
    for (let i = 0; i < this.cfg.nLayer; i++) x = await this.block(tape, x, i, b, t);
    return await this.head(tape, x, targets, opts.gradScale ?? 1);
  }

  /**
   * wpe[0:T] broadcast over the batch, (N, C), or this rank's N/p rows of it under SP. The
   * embedding op always adds a token table; a one-row zero table stands in, marked as needing
   * a gradient because the op's backward skips wpe when its token table needs none.
   */
  private async positions(tape: Tape, wpe: Tensor, b: number, t: number): Promise<Tensor> {
    const gpu = this.gpu, cx = this.context;
    let pos: Tensor;
    if (cx) {
      // Context parallelism: global positions are not 0…t−1, so wpe is looked up as a token
      // table by position (context_parallel.ts does the same) beside a frozen zero table.
      if (cx.positions.length !== t) throw new Error(`tensor parallel: ${cx.positions.length} context positions for ${t} tokens per row`);
      const host = Int32Array.from({ length: b * t }, (_, i) => cx.positions[i % t]);
      const ids = gpu.upload(host, [b, t], 'i32', 'tp.cp_positions'), zero = gpu.zeros([t, this.cfg.nEmbd], 'f32', 'tp.cp_zero');
      tape.onDispose(() => [ids, zero].forEach((x) => x.release()));
      pos = embedding(tape, ids, host, wpe, zero, b, t);
    } else {
      const zeros = new Int32Array(b * t);
      const ids = gpu.upload(zeros, [b, t], 'i32', 'tp.posids');
      const none = gpu.zeros([1, this.cfg.nEmbd], 'f32', 'tp.notokens');
      tape.onDispose(() => [ids, none].forEach((x) => x.release()));
      tape.requireGrad(none);
      pos = embedding(tape, ids, zeros, none, wpe, b, t);
    }
    return this.sequenceParallel ? await localSequenceRows(tape, pos, this.act) : pos;
  }
}

/**
 * The full gpt.ts model's weights by name as the single-rank run draws them from `seed`
 * (built once on `gpu`, read back and freed), for ranks to slice their shards from.
 */
export async function fullWeights(gpu: Gpu, make: (gpu: Gpu) => { params: ParamStore }): Promise<Map<string, Float32Array>> {
  const { params } = make(gpu);
  const flat = await gpu.read(params.values) as Float32Array;
  const out = new Map(params.params.map((p) => [p.name, flat.slice(p.offset, p.offset + p.size)]));
  params.destroy();
  return out;
}
