/**
 * What a rank's autograd tapes keep, counted by running its real model code
 * (docs/design.md#accounting-derived-from-the-model): the rank's model is built over a meta GPU (gpu/meta.ts:
 * shapes and dtypes only, every allocation recorded, nothing dispatched) and, for a parallel plan, a counting world
 * (comm/counting.ts: collectives leave their buffers as they are, receives get zeros), and one micro-batch of each
 * stage the rank holds runs forward on a tape as the trainer runs it — recomputation, autocast, the received
 * activation of a later stage, the send marker or the head and loss of the last. The pool's live bytes grow by
 * exactly what the tape keeps, rounded as the pool rounds (src/gpu/pool.ts POOL_GRANULE) and unrounded
 * (`requestedBytes`), so no op is listed here and a new architecture is counted as it is written.
 *
 * Which trainer: a world of one rank is the single-rank Trainer (src/train/trainer.ts: the model's own forward on
 * token and target tensors it allocates once, outside the tape); every other plan the mesh trainer's rank model
 * (src/parallel/mesh/rank_model.ts, whose stages upload each micro-batch's ids on its tape).
 */
import type { TrainConfig } from '../train/config.ts';
import { MetaGpu } from '../gpu/meta.ts';
import { loadShaders, type ShaderName } from '../gpu/shaders.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { Tape } from '../autograd/tape.ts';
import { RULES } from '../autograd/rules.ts';
import type { BufferPool } from '../gpu/pool.ts';
import { autocastOf } from '../autograd/autocast.ts';
import { countingWorld } from '../comm/counting.ts';
import { createModel } from '../models/registry.ts';
import type { LanguageModel } from '../models/model.ts';
import { variableDepth } from '../models/recurrence.ts';
import { rankModel } from '../parallel/mesh/rank_model.ts';
import type { ModelStages } from '../parallel/pipeline/stages.ts';
import { sendForward } from '../parallel/pipeline/pipeline_stage.ts';
import { type ParallelPlan, planWorldSize } from '../parallel/plan/plan.ts';

/** A byte count unrounded (a tensor's size in whole 4-byte words) and as the pool hands it out. */
export interface Bytes {
  raw: number;
  pooled: number;
}

/** What one micro-batch of one stage keeps on its tape. */
export interface StageTape {
  /** Global stage index; −1 for the single-rank Trainer's whole model. */
  stage: number;
  /** The activation received from the previous stage (a later stage's input leaf); zero on stage 0. */
  input: Bytes;
  /** Everything else the stage's forward keeps until its backward. */
  kept: Bytes;
}

/** What {@link countTapes} measured on one rank. */
export interface TapeCount {
  stages: StageTape[];
  /** The first block this rank runs, as kept on the tape. */
  perLayer: Bytes;
  /**
   * The largest working set a throw-away child tape allocated: a recomputed segment (its backward runs it again,
   * one at a time) or a recurrent-depth iteration outside the last k; zero when there are none.
   */
  work: Bytes;
}

const ZERO: Bytes = { raw: 0, pooled: 0 };
const minus = (a: Bytes, b: Bytes): Bytes => ({ raw: a.raw - b.raw, pooled: a.pooled - b.pooled });
const live = (pool: BufferPool): Bytes => ({ raw: pool.stats.requestedBytes, pooled: pool.stats.liveBytes });

/**
 * A tape that also measures the child tapes made from it: the pool's peak while each is open, over where it started
 * when a recording child (a recomputed segment, checkpoint.ts) begins its own backward — the segment's activations,
 * as its backward re-runs them — or over what is left once a forward one (checkpoint.ts's throw-away forward,
 * recurrent depth's detached iterations) is disposed.
 */
class CountingTape extends Tape {
  readonly work: Bytes = { ...ZERO };

  override child(recording: boolean): Tape {
    const c = super.child(recording), pool = this.gpu.pool, s = pool.stats, start = live(pool);
    const backward = c.backwardAsync.bind(c), dispose = c.dispose.bind(c);
    let seen = false;
    const note = (base: Bytes) => {
      if (seen) return;
      seen = true;
      this.work.raw = Math.max(this.work.raw, s.requestedPeakBytes - base.raw);
      this.work.pooled = Math.max(this.work.pooled, s.peakBytes - base.pooled);
    };
    pool.resetPeak();
    c.backwardAsync = (...a) => (note(start), backward(...a));
    c.dispose = () => (dispose(), note(live(pool)));
    return c;
  }
}

let sources: Promise<Record<ShaderName, string>> | null = null;

/**
 * The recurrent-depth core iterations r whose tape is the largest: r ≥ k + 1 keeps the last k iterations and runs
 * one detached, as any larger r does; training never draws more than 4·r̄ (models/recurrence.ts trainIterations).
 */
export const peakIterations = (cfg: TrainConfig): number =>
  Math.min(cfg.recurIters <= 1 ? 1 : 4 * cfg.recurIters, cfg.recurBackprop + 1);

/** Options of {@link countTapes}. */
export interface TapeCountOptions {
  /** Recurrent depth: the core iterations r to count (default {@link peakIterations}). */
  iterations?: number;
}

/**
 * One micro-batch of b rows of t tokens through every stage rank `rank` of `plan` holds (see the module doc).
 * `cfg` is the run's config with `vocabSize` the tokenizer's V.
 * @throws Error from the model's construction (a split it does not take) or its forward.
 */
export async function countTapes(
  cfg: TrainConfig,
  plan: ParallelPlan,
  vocabSize: number,
  rank: number,
  b: number,
  o: TapeCountOptions = {},
): Promise<TapeCount> {
  // The kernels specialise their WGSL before dispatching: the meta GPU carries the real sources (read once).
  const gpu = new MetaGpu({ reads: 'zeros', shaders: await (sources ??= loadShaders()) });
  const setDepth = (model: unknown) => {
    const depth = variableDepth(model);
    if (depth) depth.iterations = o.iterations ?? peakIterations(cfg);
  };
  if (planWorldSize(plan) === 1) {
    const model = createModel(gpu, cfg, vocabSize);
    setDepth(model);
    return await singleRank(gpu, model, cfg, b);
  }
  const v = plan.schedule === 'interleaved' ? plan.virtualStages : 1;
  const { stages, positions } = rankModel(gpu, cfg, plan, countingWorld(rank, planWorldSize(plan)).world, vocabSize, v);
  setDepth(stages.model);
  try {
    const out: StageTape[] = [], t = positions.length, ids = new Int32Array(b * t);
    let perLayer: Bytes | null = null;
    const work = { ...ZERO };
    for (const stage of stages.stages) {
      const s = await meshStage(gpu, stages, cfg, stage, ids, b, t);
      perLayer ??= s.perLayer;
      out.push(s.tape);
      work.raw = Math.max(work.raw, s.work.raw);
      work.pooled = Math.max(work.pooled, s.work.pooled);
    }
    return { stages: out, perLayer: perLayer!, work };
  } finally {
    stages.params.destroy();
  }
}

/** The block boundaries' live bytes: before each block, then after the last (the head's start). */
type Marks = Bytes[];

/** @throws Error when the forward passed no block boundary (a model not run as pieces, models/model.ts runPieces). */
function firstBlock(m: Marks): Bytes {
  if (m.length < 2) {
    throw new Error('activation memory: the forward ran no block through runPieces, so no per-layer bytes can be read');
  }
  return minus(m[1], m[0]);
}

/** One micro-batch of stage `stage` as pipeline_executor.ts runs its forward action. */
async function meshStage(
  gpu: MetaGpu,
  stages: ModelStages,
  cfg: TrainConfig,
  stage: number,
  ids: Int32Array,
  b: number,
  t: number,
): Promise<{ tape: StageTape; perLayer: Bytes; work: Bytes }> {
  const before = live(gpu.pool), tape = new CountingTape(gpu, stages.gradMap), marks: Marks = [];
  tape.autocast = autocastOf(cfg.precision);
  try {
    let x: Tensor, input = ZERO;
    if (stage === 0) x = await stages.embed(tape, ids, b, t);
    else {
      x = tape.alloc(stages.actShape(b, t), 'pp.act'); // what recv-act allocates
      tape.requireGrad(x);
      input = minus(live(gpu.pool), before);
    }
    const out = await stages.blocks(tape, x, stage, b, t, () => Promise.resolve(void marks.push(live(gpu.pool))));
    marks.push(live(gpu.pool));
    stages.auxLoss?.(tape, 1);
    if (stage === stages.S - 1) await stages.head(tape, out, ids, 1);
    else sendForward(tape, out, () => new Float32Array(out.size));
    const kept = minus(minus(live(gpu.pool), before), input);
    if (cfg.recompute !== 'none') await tape.backwardAsync(RULES); // recomputed segments run again here (`work`)
    return { tape: { stage, input, kept }, perLayer: firstBlock(marks), work: tape.work };
  } finally {
    tape.dispose();
  }
}

/** One micro-batch of the single-rank Trainer (train/trainer.ts microBatches). */
async function singleRank(gpu: MetaGpu, model: LanguageModel, cfg: TrainConfig, b: number): Promise<TapeCount> {
  const t = cfg.blockSize, marks: Marks = [];
  const tokens = gpu.zeros([b, t], 'i32', 'tokens'), targets = gpu.zeros([b, t], 'i32', 'targets');
  // The head is marked too, so a model of one block has its block's bytes: the same model with its head marked.
  const counted = Object.create(model, {
    head: { value: (...a: unknown[]) => (marks.push(live(gpu.pool)), (model as unknown as Headed).head(...a)) },
  }) as LanguageModel;
  const before = live(gpu.pool), tape = new CountingTape(gpu, model.params.gradMap());
  tape.autocast = autocastOf(cfg.precision);
  try {
    const beforeBlock = () => Promise.resolve(void marks.push(live(gpu.pool)));
    await counted.forward(tape, tokens, new Int32Array(b * t), targets, b, t, {
      gradScale: 1 / cfg.gradAccum,
      recompute: cfg.recompute,
      beforeBlock,
    });
    const kept = minus(live(gpu.pool), before);
    if (cfg.recompute !== 'none') await tape.backwardAsync(RULES); // recomputed segments run again here (`work`)
    return { stages: [{ stage: -1, input: ZERO, kept }], perLayer: firstBlock(marks), work: tape.work };
  } finally {
    tape.dispose();
    tokens.release();
    targets.release();
    model.params.destroy();
  }
}

/** A layered model's head piece, called with whatever its forward passes. */
interface Headed {
  head(...a: unknown[]): unknown;
}
