/**
 * A pipeline rank's stages made of tensor-parallel shards (Narayanan et al., arXiv 2104.04473
 * §2.3: tensor parallelism inside each pipeline stage): pipeline_stage.ts decides which layers
 * (and the embedding / head) this pipeline rank holds, tensor_parallel.ts's TensorParallelGPT
 * holds this tp rank's shard of exactly those parameters and runs them, and this adapter
 * presents the pair to pipeline.ts's executor as a {@link PipelineStageModel}. Nothing is
 * copied from either: the embedding, each block and the head are TensorParallelGPT's pieces.
 *
 * Activations between stages are the residual stream TensorParallelGPT keeps between blocks:
 * (b·T, C) replicated over the tp group, or this rank's (b·T/tp, C) rows under sequence
 * parallelism, so each tp rank sends its own copy / rows to the same tp rank of the next stage
 * (and each cp rank its T/cp tokens of every row to the same cp rank).
 */
import type { Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import type { Tape } from '../autograd/tape.ts';
import type { Communicator } from '../dist/communicator.ts';
import type { ParamStore } from '../nn/params.ts';
import type { GPTConfig } from '../models/gpt.ts';
import { type PipelineStageModel, selectStageParams, stageLayers } from './pipeline_stage.ts';
import { TensorParallelGPT, type TensorParallelOptions } from './tensor_parallel.ts';

/** Where a rank sits: its tp group, its pipeline index of pp (with v chunks), sp and cp. */
export interface StageShardOptions {
  tp: Communicator;
  sequenceParallel: boolean;
  /** Context parallelism (ring / Ulysses over the cp group), tensor_parallel.ts's option. */
  context?: TensorParallelOptions['context'];
  /** Pipeline index in 0…pp−1. */
  ppRank: number;
  pp: number;
  v: number;
}

/** Stages rank, rank+p, … of a GPT pipeline, each a tensor-parallel shard over `tpGroup`. */
export class TensorParallelStages implements PipelineStageModel {
  readonly model: TensorParallelGPT;
  readonly params: ParamStore;
  readonly gradMap: Map<Tensor, Tensor>;
  /** Total stages S = pp·v. */
  readonly S: number;
  /** Global stage indices held by this pipeline rank, ascending. */
  readonly stages: number[];
  /** True when this rank holds the head's copy of wte (last stage on a rank other than the first). */
  readonly headCopy: boolean;
  readonly ppRank: number;
  readonly pp: number;

  /**
   * @param full the full model's initial weights by name (pipeline_stage.ts gptInitialWeights).
   * @throws Error from selectStageParams (layers not divisible by pp·v) or TensorParallelGPT
   *   (heads or width not divisible by tp).
   */
  constructor(gpu: Gpu, readonly cfg: GPTConfig, full: ReadonlyMap<string, Float32Array>, o: StageShardOptions) {
    const sel = selectStageParams(cfg, o.ppRank, o.pp, o.v);
    this.ppRank = o.ppRank;
    this.pp = o.pp;
    this.S = o.pp * o.v;
    this.stages = sel.stages;
    this.headCopy = sel.headCopy;
    this.model = new TensorParallelGPT(gpu, cfg, full, o.tp, { sequenceParallel: o.sequenceParallel, context: o.context, select: () => sel.specs });
    this.params = this.model.params;
    this.gradMap = this.model.gradMap;
  }

  holds(s: number): boolean {
    return s >= 0 && s < this.S && s % this.pp === this.ppRank;
  }

  actShape(b: number, t: number): number[] {
    return this.model.actShape(b, t);
  }

  embed(tape: Tape, hostTokens: Int32Array, b: number, t: number): Promise<Tensor> {
    return this.model.embed(tape, hostTokens, b, t);
  }

  async blocks(tape: Tape, x: Tensor, stage: number, b: number, t: number): Promise<Tensor> {
    const [lo, hi] = stageLayers(this.cfg.nLayer, this.S, stage);
    for (let i = lo; i < hi; i++) x = await this.model.block(tape, x, i, b, t);
    return x;
  }

  async head(tape: Tape, x: Tensor, hostTargets: Int32Array, gradScale: number): Promise<Tensor> {
    return (await this.model.head(tape, x, hostTargets, gradScale)).loss!;
  }
}
