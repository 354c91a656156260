/**
 * The pipeline-parallel cut of a layered model: the nLayer blocks split evenly into S = p·v
 * stages, stage s on pipeline rank s mod p (pipeline_schedule.ts's layout); stage 0 also runs the
 * embedding, stage S−1 the head. What a rank holds is stages.ts's ModelStages; this file has the
 * split arithmetic, the interface the executor drives and the send marker.
 */
import type { Tensor } from '../../gpu/tensor.ts';
import type { Tape } from '../../autograd/tape.ts';
import type { ParamStore } from '../../nn/params.ts';

/**
 * Checks that nLayer blocks split evenly into p·v stages.
 * @throws Error naming nLayer, p and v when they do not (or when p, v are not positive integers).
 */
export function checkPipelineSplit(nLayer: number, p: number, v = 1): void {
  for (const [k, x] of [['pp', p], ['virtual stages', v]] as const) {
    if (!Number.isInteger(x) || x < 1) throw new Error(`pipeline: ${k} must be a positive integer, got ${x}`);
  }
  if (nLayer % (p * v)) {
    throw new Error(
      `pipeline: nLayer (${nLayer}) must be divisible by pp·v (${p}·${v} = ${
        p * v
      }) so every stage holds the same number of blocks`,
    );
  }
}

/** Blocks [lo, hi) of stage `stage` out of S (nLayer divisible by S; see checkPipelineSplit). */
export function stageLayers(nLayer: number, S: number, stage: number): [number, number] {
  const per = nLayer / S;
  return [stage * per, (stage + 1) * per];
}

/**
 * What the pipeline executor (pipeline_executor.ts) needs from one rank's stages: stages.ts's
 * ModelStages. Every method may return a promise (tensor-parallel pieces communicate inside
 * their forward).
 */
/** Awaited before global block i's forward (ZeRO-3 gathers that layer there; ForwardOptions.beforeBlock). */
export type BeforeBlock = (i: number) => Promise<void>;

export interface PipelineStageModel {
  readonly params: ParamStore;
  /** Parameter values → gradients for the stage tapes (may hold views besides params.gradMap()). */
  readonly gradMap: Map<Tensor, Tensor>;
  /** Total stages S = p·v. */
  readonly S: number;
  /** Whether this rank runs global stage `s`. */
  holds(s: number): boolean;
  /** Shape of the activation one stage hands the next for a micro-batch of b rows of t tokens. */
  actShape(b: number, t: number): number[];
  /** Stage 0's input from host token ids (b·t). */
  embed(tape: Tape, hostTokens: Int32Array, b: number, t: number): Tensor | Promise<Tensor>;
  /**
   * Stage `stage`'s blocks on its input activation; `beforeBlock(i)` is awaited before global
   * block i (ZeRO-3 gathers that layer there, as ForwardOptions.beforeBlock).
   */
  blocks(
    tape: Tape,
    x: Tensor,
    stage: number,
    b: number,
    t: number,
    beforeBlock?: BeforeBlock,
  ): Tensor | Promise<Tensor>;
  /** The last stage's loss (2) = [mean cross-entropy, count] vs host targets (b·t), its gradient seeded with gradScale. */
  head(tape: Tape, x: Tensor, hostTargets: Int32Array, gradScale: number): Tensor | Promise<Tensor>;
  /**
   * The load-balancing loss (2) = [Σ aux, 0] of the MoE layers the last {@link blocks} call ran,
   * recorded on `tape` with gradient scale gradScale (its rule needs no upstream gradient, so it
   * enters this stage's backward wherever the stage sits); null without MoE layers.
   */
  auxLoss?(tape: Tape, gradScale: number): Tensor | null;
}

/**
 * Marks `y` (a stage's output, B·T·C) as sent forward: a `collective` node whose backward ignores
 * dy (nothing downstream on this rank) and returns the gradient the next stage sent back, which
 * the rule accumulates into y's gradient — Megatron's send_forward / recv_backward pair, with the
 * receive done earlier by the schedule's `recv-grad`.
 * @throws (in backward) Error when that gradient has not arrived or has the wrong length.
 */
export function sendForward(tape: Tape, y: Tensor, received: () => Float32Array): void {
  const marker = tape.alloc([1], 'pp.sent');
  tape.record(
    {
      op: 'collective',
      x: y,
      y: marker,
      name: 'pp.sendForward',
      backward: () => {
        const g = received();
        if (g.length !== y.size) {
          throw new Error(
            `pp.sendForward: received gradient of ${g.length} elements for an output of ${y.size}`,
          );
        }
        return Promise.resolve(g);
      },
    },
    [y],
    [marker],
  );
}
