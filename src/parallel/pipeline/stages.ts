/**
 * One rank's part of any layered model (src/models/model.ts LayeredModel; docs/design.md#one-model-many-contexts):
 * the blocks of its pipeline stages, the embedding on the first stage, the head on the last,
 * each parameter as this rank's tensor-parallel shard, run over the rank's RankContext. It is
 * the one model object of every parallel trainer: a pipeline stage for the executor
 * (pipeline_executor.ts), and with pp = 1 the whole model of a tp / cp / mesh rank.
 *
 * Parameters are the single-rank model's: every rank draws the whole model from the seed in
 * declaration order and keeps its slice (nn/params.ts placeSpecs). As in Megatron-LM
 * (`initialize_word_embeddings`), the last stage keeps its own copy of a tied embedding when it
 * is not on the first rank; the two copies get the sum of both gradients each step (the
 * embedding group), so they stay equal.
 */
import type { Gpu } from '../../gpu/context.ts';
import type { Tensor } from '../../gpu/tensor.ts';
import type { Tape } from '../../autograd/tape.ts';
import type { ParamSpec, ParamStore, Placement } from '../../nn/params.ts';
import type { TrainConfig } from '../../train/config.ts';
import { createModel, createMoEModel, MOE_ARCHS, piecesOf, pipelineBlocks } from '../../models/registry.ts';
import { type MoELanguageModel, withAuxLoss } from '../../models/moe_layer.ts';
import type { FloatCollectives } from '../../comm/compressed.ts';
import { expertShard, moeExpertParallel } from '../expert/expert_exchange.ts';
import type { ForwardResult, LayeredModel } from '../../models/model.ts';
import { runPieces } from '../../models/model.ts';
import { add } from '../../autograd/ops.ts';
import type { ModelInput } from '../../models/context.ts';
import { recomputeContext, runBlock } from '../../models/recompute.ts';
import { type BeforeBlock, checkPipelineSplit, type PipelineStageModel, stageLayers } from './pipeline_stage.ts';
import type { RankContext } from '../mesh/rank_context.ts';
import { shardKind, shardParam, shardShape } from '../tensor/tp_table.ts';

/** Where a rank sits in the pipeline (stage rank ppRank of pp, v chunks each). */
export interface StagePlace {
  ppRank: number;
  pp: number;
  v: number;
}

/**
 * The placement of one pipeline rank with a tp shard: which parameters it keeps (by the piece
 * that uses them) and its tensor-parallel slice of each.
 * A block shared by layers of several stages (the hybrid's attention) is held by every pipeline
 * rank; grad_sync.ts sums its gradients over the pp group, so the copies stay equal.
 * @throws Error for an unknown architecture.
 */
export function stagePlacement(arch: string, nLayer: number, at: StagePlace, tp: number, tpRank: number): Placement {
  const keeps = stageKeeps(arch, nLayer, at);
  return (s: ParamSpec) => {
    const held = keeps(s.name);
    if (!held) return null;
    const kind = tp > 1 ? shardKind(s.name) : 'replicated';
    return {
      shape: shardShape(kind, s.shape, tp),
      slice: (full) => shardParam(kind, full, s.shape, tp, tpRank),
      copy: held === 'copy',
    };
  };
}

/**
 * Whether pipeline rank `at.ppRank` keeps parameter `name`, by the piece that uses it: a block's
 * on the rank running that layer, the embedding's on the first, the head's on the last, a tied
 * embedding on both (`'copy'` on the last when it is not the first), a shared block's everywhere.
 * @throws Error for an unknown architecture.
 */
export function stageKeeps(arch: string, nLayer: number, at: StagePlace): (name: string) => boolean | 'copy' {
  const pieceOf = piecesOf(arch);
  const S = at.pp * at.v, first = at.ppRank === 0, last = (S - 1) % at.pp === at.ppRank;
  const owner = (layer: number) => Math.floor(layer / (nLayer / S)) % at.pp;
  return (name) => {
    const piece = pieceOf(name);
    if (typeof piece === 'number') return owner(piece) === at.ppRank;
    if (piece === 'embed') return first;
    if (piece === 'head') return last;
    if (piece === 'tied') return first ? true : last ? 'copy' : false;
    return true;
  };
}

/** A rank's stages of a layered model over its RankContext (see the module doc). */
export class ModelStages implements PipelineStageModel {
  readonly model: LayeredModel;
  readonly params: ParamStore;
  /** The stage tapes' value → gradient map; {@link rebindGrads} renews it when ZeRO moves the store's buffers. */
  gradMap: Map<Tensor, Tensor>;
  /** Total stages S = pp·v. */
  readonly S: number;
  /** Global stage indices held by this rank, ascending. */
  readonly stages: number[];
  /** The tied embedding's name, when the architecture has one. */
  readonly tied: string | null;
  /** Parameters of a block several stages run (the hybrid's shared attention): every pp rank holds them. */
  readonly shared: string[];
  /** True when this rank holds the head's copy of the tied embedding (last stage ≠ first rank); the store's last parameter. */
  readonly headCopy: boolean;

  /**
   * @throws Error from checkPipelineSplit (layers not divisible by pp·v), for heads not
   *   divisible by tp, from stagePlacement, the tensor-parallel shapes (a width not divisible
   *   by tp) or the model's own config check.
   */
  constructor(
    readonly gpu: Gpu,
    readonly cfg: TrainConfig,
    vocabSize: number,
    readonly ctx: RankContext,
    readonly at: StagePlace,
    ep?: FloatCollectives,
  ) {
    checkPipelineSplit(pipelineBlocks(cfg), at.pp, at.v);
    if (ctx.tp > 1 && ['gpt', 'hybrid', 'linear'].includes(cfg.arch) && cfg.nHead % ctx.tp) {
      throw new Error(`tensor parallel: heads ${cfg.nHead} not divisible by tp ${ctx.tp}`);
    }
    this.S = at.pp * at.v;
    this.stages = [...Array(at.v).keys()].map((c) => c * at.pp + at.ppRank);
    const whole = at.pp === 1 && ctx.tp === 1;
    const place = whole ? undefined : stagePlacement(cfg.arch, pipelineBlocks(cfg), at, ctx.tp, ctx.o.tp.rank);
    const model = (MOE_ARCHS as readonly string[]).includes(cfg.arch)
      ? moeStageModel(gpu, cfg, vocabSize, ctx, place, ep)
      : createModel(gpu, cfg, vocabSize, cfg.seed, place);
    if (!('block' in model)) throw new Error(`arch '${cfg.arch}' is not written as pieces over a parallel context yet`);
    this.model = model as LayeredModel;
    this.params = model.params;
    this.gradMap = ctx.gradMap(model.params);
    const pieceOf = piecesOf(cfg.arch);
    const names = model.params.params.map((p) => p.name);
    this.tied = names.find((n) => pieceOf(n) === 'tied') ?? null;
    this.shared = names.filter((n) => pieceOf(n) === 'shared');
    this.headCopy = this.holds(this.S - 1) && at.ppRank !== 0 && this.tied !== null;
  }

  /** Rebuilds {@link gradMap} after ZeRO-2/3 moved the store's values or gradients (zero_units.ts). */
  rebindGrads(): void {
    this.gradMap = this.ctx.gradMap(this.params);
  }

  /**
   * This rank's global stages whose pieces read parameter `name`, ascending: a block's the stage
   * running that layer, the embedding's stage 0, the head's the last, the tied embedding's
   * whichever of those two this rank holds, a shared block's every local stage. ZeRO-2/3
   * (zero_sync.ts) reduce a unit in the backward of the lowest of them, the last to add to it
   * in a micro-batch (docs/design.md#zero).
   */
  stagesUsing(name: string): number[] {
    const piece = piecesOf(this.cfg.arch)(name), last = this.S - 1, per = this.cfg.nLayer / this.S;
    const on = typeof piece === 'number'
      ? [Math.floor(piece / per)]
      : piece === 'embed'
      ? [0]
      : piece === 'head'
      ? [last]
      : piece === 'tied'
      ? [0, last]
      : this.stages;
    return this.stages.filter((s) => on.includes(s));
  }

  holds(s: number): boolean {
    return s >= 0 && s < this.S && s % this.at.pp === this.at.ppRank;
  }

  actShape(b: number, t: number): number[] {
    return this.ctx.actShape(b, t, this.cfg.nEmbd);
  }

  embed(tape: Tape, hostTokens: Int32Array, b: number, t: number): Promise<Tensor> {
    return this.model.embed(this.ctx, tape, input(hostTokens, null), b, t, {});
  }

  async blocks(tape: Tape, x: Tensor, stage: number, b: number, t: number, beforeBlock?: BeforeBlock): Promise<Tensor> {
    const [lo, hi] = stageLayers(this.model.nLayer, this.S, stage), mode = this.cfg.recompute;
    const ctx = recomputeContext(this.ctx, mode);
    // auxLoss reads the routings of these blocks only: an earlier pass's (a validation forward,
    // whose tape is gone) must not be counted with them.
    const m = this.model as Partial<MoELanguageModel>;
    if (m.moeLayers) m.moeLayers.lastRouting = [];
    for (let i = lo; i < hi; i++) {
      await beforeBlock?.(i);
      x = await runBlock(this.model, ctx, tape, x, i, b, t, mode);
    }
    return x;
  }

  async head(tape: Tape, x: Tensor, hostTargets: Int32Array, gradScale: number): Promise<Tensor> {
    return (await this.model.head(this.ctx, tape, x, input(new Int32Array(0), hostTargets), { gradScale })).loss!;
  }

  auxLoss(tape: Tape, gradScale: number): Tensor | null {
    const m = this.model as Partial<MoELanguageModel>;
    if (!m.moeLayers) return null;
    const routings = m.moeLayers.lastRouting;
    m.moeLayers.lastRouting = [];
    if (!tape.recording || !routings.length || m.moe!.auxLossWeight === 0) return null;
    const base = tape.alloc([2], 'aux.base');
    this.gpu.clear(base);
    // Under sp each tp rank routes its rows as one token group and the router's gradient is summed
    // over tp, so each rank seeds 1/tp of its group's term: α·mean over the groups, as one rank would.
    const share = this.ctx.sequenceParallel ? 1 / this.ctx.tp : 1;
    return withAuxLoss(tape, base, routings, m.moe!, gradScale * share);
  }

  /**
   * The whole forward (pp = 1): tokens and targets (B·T) host ids of this rank's rows and tokens.
   * Returns this rank's logits and, with targets, the loss (2) on the GPU. `beforeBlock` as in
   * ForwardOptions (ZeRO-3's per-layer gathers).
   */
  async forward(
    tape: Tape,
    hostTokens: Int32Array,
    hostTargets: Int32Array | null,
    b: number,
    t: number,
    gradScale = 1,
    beforeBlock?: BeforeBlock,
  ): Promise<ForwardResult> {
    const out = await runPieces(this.model, this.ctx, tape, input(hostTokens, hostTargets), b, t, {
      gradScale,
      recompute: this.cfg.recompute,
      beforeBlock,
    });
    const aux = this.auxLoss(tape, gradScale);
    if (!aux || !out.loss) return out;
    return { ...out, loss: add(tape, out.loss, aux, 'loss+aux') };
  }
}

/**
 * A MoE model's stage: the rank's placement of what its expert shard keeps (experts
 * [i·E/ep, (i+1)·E/ep) for EP index i, expert_exchange.ts expertShard), and the context's MoE
 * function — its own experts, or dispatch / combine over the EP group (expert_exchange.ts).
 * Each rank routes its rows of a micro-batch as one token group, as the single-rank model with
 * groups = dp does on each micro-batch.
 */
function moeStageModel(
  gpu: Gpu,
  cfg: TrainConfig,
  vocabSize: number,
  ctx: RankContext,
  place: Placement | undefined,
  ep: FloatCollectives | undefined,
): MoELanguageModel {
  const shard = expertShard(cfg.nExpert, ep?.size ?? 1, ep?.rank ?? 0);
  const model = createMoEModel(gpu, cfg, vocabSize, { shard, place, groups: 1 });
  ctx.moe = (call) => (ep ? moeExpertParallel(call.tape, model, call, ep) : model.moeLayers.local(call.tape, call));
  return model;
}

function input(hostTokens: Int32Array, hostTargets: Int32Array | null): ModelInput {
  return { hostTokens, tokens: null, targets: null, hostTargets };
}
