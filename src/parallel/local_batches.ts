/**
 * One data-parallel rank's share of every global micro-batch and its loss, for the trainer that
 * runs a micro-batch as one forward (zero.ts): rows [rank·b, (rank+1)·b) of the
 * batch the single-rank Trainer draws (b = batchSize / size), and under context parallelism the
 * rank's tokens of each row. Each rank's loss is the mean over its tokens, so the average over
 * equal token counts is the global mean.
 */
import type { Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import type { Tape } from '../autograd/tape.ts';
import { axpy } from '../kernels/elementwise.ts';
import type { Communicator } from '../comm/communicator.ts';
import type { LanguageModel } from '../models/model.ts';
import type { TextDataset } from '../data/dataset.ts';
import type { TrainConfig } from '../train/config.ts';
import { takePositions } from './context_parallel.ts';

/**
 * Encodes the forward of b rows of t tokens (host ids x, targets y, (b, t) each) on `tape` with
 * loss-gradient scale `gradScale` (and ForwardOptions' `beforeBlock` hook); resolves to the loss
 * tensor (2 elements: mean, count).
 */
export type RowsForward = (
  tape: Tape,
  x: Int32Array,
  y: Int32Array,
  b: number,
  t: number,
  gradScale: number,
  beforeBlock?: (i: number) => Promise<void>,
) => Promise<Tensor>;

/** The forward of a whole-model replica (`model.forward` over uploaded (b, t) token and target tensors). */
export function replicaForward(gpu: Gpu, model: LanguageModel, cfg: TrainConfig): RowsForward {
  let io: { tokens: Tensor; targets: Tensor } | null = null;
  return async (tape, x, y, b, t, gradScale, beforeBlock) => {
    io ??= { tokens: gpu.zeros([b, t], 'i32', 'dp.tokens'), targets: gpu.zeros([b, t], 'i32', 'dp.targets') };
    gpu.write(io.tokens, x);
    gpu.write(io.targets, y);
    const opts = { gradScale, recompute: cfg.recompute, beforeBlock };
    const out = await model.forward(tape, io.tokens, x, io.targets, b, t, opts);
    return out.loss!;
  };
}

/** This rank's rows (and tokens) of each micro-batch, and a GPU accumulator of the step's mean loss. */
export class LocalBatches {
  readonly rows: number;
  private readonly lossAcc: Tensor;

  /**
   * @param rank, size this rank's index in the data-parallel group and its size (size divides batchSize).
   * @param positions the global positions of this rank's tokens of every row (context
   *   parallelism, context_parallel.ts `cpPositions`); all T when absent.
   */
  constructor(
    readonly gpu: Gpu,
    readonly data: TextDataset,
    readonly cfg: TrainConfig,
    readonly rank: number,
    readonly size: number,
    readonly forwardRows: RowsForward,
    readonly positions?: Int32Array,
  ) {
    this.rows = cfg.batchSize / size;
    this.lossAcc = gpu.zeros([2], 'f32', 'dp.loss');
  }

  /** Encodes zeroing of the step's loss accumulator. */
  startStep(): void {
    this.gpu.clear(this.lossAcc);
  }

  /**
   * Encodes the forward of this rank's rows of micro-batch `micro` of step `step` on `tape`
   * with loss gradient scale 1/gradAccum, adding loss/gradAccum to the accumulator.
   */
  async forward(tape: Tape, step: number, micro: number, beforeBlock?: (i: number) => Promise<void>): Promise<void> {
    const { cfg } = this;
    const T = cfg.blockSize, b = this.rows, from = this.rank * b * T;
    const batch = this.data.batch('train', cfg.batchSize, T, cfg.seed, step, micro);
    const mine = (a: Int32Array) => {
      const rows = a.slice(from, from + b * T);
      return this.positions ? takePositions(rows, b, T, this.positions) : rows;
    };
    const t = this.positions?.length ?? T;
    const loss = await this.forwardRows(tape, mine(batch.x), mine(batch.y), b, t, 1 / cfg.gradAccum, beforeBlock);
    axpy(this.gpu, 1 / cfg.gradAccum, loss, this.lossAcc);
  }

  /** The global mean loss of the step: this rank's mean averaged over `group` (1 element sent per peer step). */
  async globalLoss(group: Communicator): Promise<number> {
    const local = (await this.gpu.read(this.lossAcc)).slice(0, 1) as Float32Array;
    return (await group.allReduce(local, { op: 'avg' }))[0];
  }
}
