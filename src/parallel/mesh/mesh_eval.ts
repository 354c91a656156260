/**
 * Validation loss of a split model (tensor, pipeline or context parallel), computed by the ranks
 * together: each fixed validation pass (train/evaluate.ts evalPasses, the single-rank
 * evaluation's) goes forward once through the pipeline — stage s on pipeline rank s mod pp,
 * activations sent on — and the last stage's cross-entropy, averaged over the dp·cp ranks'
 * equal shares of the batch, is summed over the world. Every collective runs on `eval`
 * sub-groups, uncompressed, so a step's traffic accounting never counts validation.
 */
import type { Gpu } from '../../gpu/context.ts';
import type { Tensor } from '../../gpu/tensor.ts';
import type { Communicator } from '../../comm/communicator.ts';
import type { TrainConfig } from '../../train/config.ts';
import { EVAL_STEP, evalPasses } from '../../train/evaluate.ts';
import type { TextDataset } from '../../data/dataset.ts';
import type { PipeAction, PipelineSchedule } from '../pipeline/pipeline_schedule.ts';
import { PipelineExecutor } from '../pipeline/pipeline_executor.ts';
import type { ModelStages } from '../pipeline/stages.ts';
import { subGroup } from '../data/data_parallel.ts';

/**
 * One micro-batch forward through S = pp·v stages, no backward: stage s runs on pipeline rank
 * s mod pp, receiving its input from stage s − 1 and sending its output to stage s + 1.
 */
export function forwardProgram(pp: number, v: number): PipelineSchedule {
  const S = pp * v, ranks: PipeAction[][] = [...Array(pp)].map(() => []);
  for (let s = 0; s < S; s++) {
    const acts = ranks[s % pp];
    if (s > 0 && pp > 1) acts.push({ kind: 'recv-act', micro: 0, stage: s, peer: (s - 1) % pp });
    acts.push({ kind: 'forward', micro: 0, stage: s });
    if (s < S - 1 && pp > 1) acts.push({ kind: 'send-act', micro: 0, stage: s, peer: (s + 1) % pp });
  }
  return { kind: 'gpipe', p: pp, m: 1, v, ranks };
}

/** What a rank's evaluation needs from its mesh trainer. */
export interface MeshEvalRank {
  gpu: Gpu;
  cfg: TrainConfig;
  data: TextDataset;
  stages: ModelStages;
  /** Rows of this dp replica per batch, and this rank's global token positions. */
  rows: number;
  positions: Int32Array;
  coords: { dp: number; tp: number };
  dp: number;
  dpcp: number;
  /** This rank's cp tokens of each of its dp replica's rows: (rows, T) → (rows, T/cp). */
  tokensOf: (a: Int32Array) => Int32Array;
}

/** The ranks' validation loss over their mesh (module doc); every rank of the world calls {@link MeshEval.run}. */
export class MeshEval {
  private readonly exec: PipelineExecutor;
  private readonly scalars: Communicator;
  private readonly acc: Tensor;

  /** @param pp this rank's pp group; `world` the world communicator. */
  constructor(readonly r: MeshEvalRank, pp: Communicator, world: Communicator, v: number) {
    const program = forwardProgram(pp.size, v);
    this.exec = new PipelineExecutor(r.gpu, r.stages, subGroup(pp, 'eval'), program, r.rows, r.positions.length);
    this.scalars = subGroup(world, 'scalars/eval');
    this.acc = r.gpu.zeros([2], 'f32', 'mesh.eval');
  }

  /**
   * Mean cross-entropy over cfg.evalBatches fixed validation batches, the value the single-rank
   * evaluation reports for the same weights.
   * @throws (rejects with) a peer's failure or timeout.
   */
  async run(): Promise<number> {
    const { gpu, cfg, data, stages, coords } = this.r, passes = evalPasses(cfg, coords.dp, this.r.dp);
    const n = passes.length;
    gpu.clear(this.acc);
    await stages.ctx.withGroups('eval', async () => {
      for (const p of passes) {
        const batch = data.rows('val', cfg.blockSize, cfg.seed, EVAL_STEP, p.from, p.to, p.stream);
        await this.exec.runForward(this.r.tokensOf(batch.x), this.r.tokensOf(batch.y), this.acc);
      }
    });
    const share = coords.tp === 0 ? (await gpu.read(this.acc))[0] / (n * this.r.dpcp) : 0;
    return (await this.scalars.allReduce(new Float32Array([share]), { op: 'sum' }))[0];
  }

  release(): void {
    this.acc.release();
  }
}
