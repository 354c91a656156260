/**
 * One pipeline rank's program run for one step (docs/design.md#pipeline-parallelism and
 * docs/design.md#pipeline-schedules-and-the-bubble; picotron's pipeline_parallel.py, Megatron-LM
 * `core/pipeline_parallel/schedules.py` + `p2p_communication.py`), by the mesh trainer (mesh_trainer.ts) over its
 * ModelStages (stages.ts), with pp = 1 too. Which plans split into stages under which schedule are entries of the
 * plan's one rule table (plan/rule_table.ts); the program is pipeline_schedule.ts's. The semantics:
 *
 * - Batch: the single-rank run's global batch split in order into m micro-batches of b = B/m
 *   rows (per dp replica); the last stage's loss gradient is scaled by 1/m, so the summed
 *   gradient is the gradient of the batch mean (equal target counts per micro-batch; goldfish
 *   masking is refused).
 * - Forward of (micro, stage): a Tape per (micro, stage), alive until that backward. A stage
 *   > 0 starts from the received activation, a tape leaf with `requireGrad`. A stage that is not
 *   last ends in `sendForward`, a `collective` node on its output whose backward returns the
 *   gradient `recv-grad` received (Megatron's send_forward/recv_backward pair as one autograd
 *   function), so backward starts there exactly as from a loss.
 * - Split schedules (zero_bubble.ts, docs/design.md#zero-bubble-zb-h1): `backward` is the tape's phase B
 *   (backwardInputAsync), whose input gradient `send-grad` ships at once; `weight` runs phase W
 *   (backwardWeights), after which the parameters' gradients are complete and the tape is freed.
 * - Messages are point-to-point on the pp group (buffered sends): `send-act` reads the output
 *   back and sends b·T·C floats (/tp under sp), `recv-act` writes them into a GPU tensor;
 *   `send-grad` sends the input's gradient.
 * - After the last backward: the embedding group {first, last} allReduces (sum) the two copies'
 *   gradients of a tied embedding (Megatron `_allreduce_word_embedding_grads`); the head's copy
 *   is left out of the gradient norm, as Megatron skips shared parameters.
 *
 * Elements sent per step by pp rank r (S = p·v, b = B/m): m·b·T·C·(#own stages s < S−1) +
 * m·b·T·C·(#own stages s > 0) in p2p sends (2·m·b·T·C per stage boundary in total), plus a ring
 * allReduce of V·C on the embedding group (first and last rank only).
 *
 * Every action is timed into a per-rank timeline of compute / comm / idle spans, idle being the
 * wait of a receive for its peer: the measured counterpart of pipeline_schedule.ts `dryRun`.
 */
import type { Autocast } from '../../autograd/autocast.ts';
import type { Gpu } from '../../gpu/context.ts';
import type { Tensor } from '../../gpu/tensor.ts';
import { Tape } from '../../autograd/tape.ts';
import { RULES } from '../../autograd/rules.ts';
import { axpy } from '../../kernels/elementwise.ts';
import type { FloatCollectives } from '../../comm/compressed.ts';
import { wallMs } from '../../comm/trace.ts';
import type { PipeAction, PipelineSchedule } from './pipeline_schedule.ts';
import { label, type Span } from './pipeline_sim.ts';
import { type BeforeBlock, type PipelineStageModel, sendForward } from './pipeline_stage.ts';
import { LoggingTape } from '../data/buckets.ts';

/** What one (micro, stage) keeps between its actions. */
interface Slot {
  tape: Tape;
  input?: Tensor;
  output?: Tensor;
  /** Gradient of the output, received (or handed over locally) before the backward. */
  dOut?: Float32Array;
  /** Gradient of the input after the backward, to send back. */
  dIn?: Float32Array;
}

/**
 * How the trainer wants a (micro, stage) tape made, run forward and backpropagated, when not the
 * default (a Tape over the stage's gradients, the stage's pieces, backwardAsync): the
 * data-parallel buckets and ZeRO log a tape and reduce each bucket as its backward finishes it;
 * ZeRO-3 wraps each forward to gather the layers it runs, one block at a time.
 */
export interface ExecutorHooks {
  /** The tape of (micro, stage); `stage` is global (an interleaved rank holds several). */
  tape?(micro: number, stage: number): Tape;
  backward?(tape: Tape, micro: number, stage: number): Promise<void>;
  /**
   * A split schedule's W of (micro, stage), after its B (backwardInputAsync) ran: the gradient
   * syncs see each parameter's gradient only here, once it is complete. Default: backwardWeights.
   */
  weights?(tape: Tape, micro: number, stage: number): Promise<void>;
  /** Runs one forward action's compute; `run` awaits `beforeBlock(i)` before global block i. */
  forward?(micro: number, stage: number, run: (beforeBlock?: BeforeBlock) => Promise<void>): Promise<void>;
}

/**
 * Hooks under which micro-batch j records on a LoggingTape and backpropagates with
 * `backward(tape, stage, false)` where `logs(j)` — a reduction that runs inside the backward,
 * bucket by bucket (grad_sync.ts's DDP buckets, zero_sync.ts's reduce-scatters of the stage's
 * units) — and as by default elsewhere. Under a split schedule the reduction runs in W instead,
 * as `backward(tape, stage, true)` (buckets.ts BucketHooks.weightsOnly).
 */
export function bucketedHooks(
  gpu: Gpu,
  model: PipelineStageModel,
  logs: (micro: number) => boolean,
  backward: (tape: LoggingTape, stage: number, weightsOnly: boolean) => Promise<void>,
): ExecutorHooks {
  return {
    tape: (micro) => logs(micro) ? new LoggingTape(gpu, model.gradMap) : new Tape(gpu, model.gradMap),
    backward: (tape, micro, stage) =>
      logs(micro) ? backward(tape as LoggingTape, stage, false) : tape.backwardAsync(RULES),
    weights: (tape, micro, stage) =>
      logs(micro) ? backward(tape as LoggingTape, stage, true) : Promise.resolve(tape.backwardWeights()),
  };
}

/** Records a span of `kind` from `start` (epoch ms) to now. */
export type SpanFn = (kind: Span['kind'], start: number, label: string, action?: PipeAction) => void;

/**
 * Runs one pipeline rank's program of a schedule over its stage model for one step. Messages go
 * over `p2p` (the pp group; group rank = pipeline rank).
 */
export class PipelineExecutor {
  /**
   * @param rows b, rows per micro-batch. @param t tokens per row.
   * @param p2p the pp group, used for send/recv only.
   */
  constructor(
    readonly gpu: Gpu,
    readonly model: PipelineStageModel,
    readonly p2p: FloatCollectives,
    readonly plan: PipelineSchedule,
    readonly rows: number,
    readonly t: number,
  ) {}

  private hooks: ExecutorHooks = {};
  /** Mixed precision of every tape this executor opens (autograd/autocast.ts); null for f32. */
  autocast: Autocast | null = null;
  /** The loss scale S the backward starts from (f16-mixed, train/loss_scale.ts); 1 otherwise. */
  lossScale = 1;

  /**
   * Forward passes only (validation): runs this rank's program — forward, send-act and recv-act
   * actions (mesh_eval.ts forwardProgram) — with no loss scale and no load-balancing terms, so
   * `lossAcc` gets the cross-entropy alone, then disposes every tape.
   * @throws (rejects with) a peer's failure or timeout, or an action out of order.
   */
  async runForward(x: Int32Array, y: Int32Array, lossAcc: Tensor): Promise<void> {
    const slots = new Map<string, Slot>(), scale = this.lossScale;
    this.hooks = {};
    this.lossScale = 1;
    this.forwardOnly = true;
    try {
      for (const a of this.plan.ranks[this.p2p.rank]) await this.action(a, x, y, lossAcc, slots, () => {});
    } finally {
      for (const s of slots.values()) s.tape.dispose();
      this.lossScale = scale;
      this.forwardOnly = false;
    }
  }

  private forwardOnly = false;

  /**
   * Runs this rank's program over micro-batches of `x`, `y` (m·b·t host ids, micro i = rows
   * [i·b, (i+1)·b)); the last stage adds loss/m of every micro-batch to `lossAcc` (2), every
   * stage with MoE layers their load-balancing loss/m.
   * @throws (rejects with) a peer's failure or timeout, or a schedule action out of order.
   */
  async run(x: Int32Array, y: Int32Array, lossAcc: Tensor, span: SpanFn, hooks: ExecutorHooks = {}): Promise<void> {
    this.hooks = hooks;
    const slots = new Map<string, Slot>();
    for (const a of this.plan.ranks[this.p2p.rank]) await this.action(a, x, y, lossAcc, slots, span);
    if (slots.size) throw new Error(`pipeline: ${slots.size} (micro, stage) slots left open after the schedule`);
  }

  /** Executes one action of this rank's program. */
  private async action(
    a: PipeAction,
    bx: Int32Array,
    by: Int32Array,
    lossAcc: Tensor,
    slots: Map<string, Slot>,
    span: SpanFn,
  ): Promise<void> {
    const { gpu, model } = this;
    const key = (micro: number, stage: number) => `${micro}:${stage}`;
    const b = this.rows, t = this.t, shape = model.actShape(b, t), size = shape.reduce((u, w) => u * w, 1);
    const open = (micro: number, stage: number) => {
      let s = slots.get(key(micro, stage));
      if (!s) {
        slots.set(key(micro, stage), s = { tape: this.hooks.tape?.(micro, stage) ?? new Tape(gpu, model.gradMap) });
        s.tape.autocast = this.autocast;
      }
      return s;
    };
    const slot = open(a.micro, a.stage);
    const close = () => slots.delete(key(a.micro, a.stage));
    const split = this.plan.kind === 'zb-h1';
    const start = wallMs(), name = label(a, true);
    switch (a.kind) {
      case 'forward': {
        const { tape } = slot, rows = [a.micro * b * t, (a.micro + 1) * b * t] as const;
        if (!slot.input && a.stage > 0 && model.holds(a.stage - 1)) {
          this.handOver(slots.get(key(a.micro, a.stage - 1)), slot, shape);
        }
        if (a.stage > 0 && !slot.input) throw new Error(`pipeline: ${name} runs before its activation arrived`);
        const run = async (beforeBlock?: BeforeBlock) => {
          const x = a.stage === 0 ? await model.embed(tape, bx.slice(...rows), b, t) : slot.input!;
          const out = await model.blocks(tape, x, a.stage, b, t, beforeBlock), m = this.plan.m;
          const aux = this.forwardOnly ? null : model.auxLoss?.(tape, this.lossScale / m);
          if (aux) axpy(gpu, 1 / m, aux, lossAcc); // the stage's MoE load-balancing terms join the loss it reports
          if (a.stage === model.S - 1) {
            axpy(gpu, 1 / m, await model.head(tape, out, by.slice(...rows), this.lossScale / m), lossAcc);
          } else {
            slot.output = out;
            sendForward(tape, out, () => {
              if (!slot.dOut) {
                throw new Error(
                  `pipeline: backward of micro ${a.micro} stage ${a.stage} has no output gradient (recv-grad missing)`,
                );
              }
              return slot.dOut;
            });
          }
        };
        await (this.hooks.forward?.(a.micro, a.stage, run) ?? run());
        await gpu.sync();
        return void span('compute', start, name, a);
      }
      case 'backward': {
        // A split schedule's B: input gradients only (no gradient sync sees a parameter); the slot stays open for its W.
        if (split) await slot.tape.backwardInputAsync(RULES);
        else await (this.hooks.backward?.(slot.tape, a.micro, a.stage) ?? slot.tape.backwardAsync(RULES));
        if (a.stage > 0) {
          const g = slot.tape.gradOf(slot.input!);
          slot.dIn = g ? ((await gpu.read(g)) as Float32Array).slice() : new Float32Array(size);
        } else await gpu.sync();
        if (a.stage > 0 && model.holds(a.stage - 1)) open(a.micro, a.stage - 1).dOut = slot.dIn; // same-rank hand-off (p = 1)
        if (!split) {
          slot.tape.dispose();
          if (a.stage === 0 || model.holds(a.stage - 1)) close();
        }
        return void span('compute', start, name, a);
      }
      case 'weight': {
        // W: the parameters' gradients B deferred; only now is each one complete, so the syncs run here.
        await (this.hooks.weights?.(slot.tape, a.micro, a.stage) ?? slot.tape.backwardWeights());
        await gpu.sync();
        slot.tape.dispose();
        close();
        return void span('compute', start, name, a);
      }
      case 'send-act': {
        const host = (await gpu.read(slot.output!)) as Float32Array;
        await this.p2p.send(host, a.peer!);
        return void span('comm', start, name, a);
      }
      case 'send-grad': {
        await this.p2p.send(slot.dIn!, a.peer!);
        if (!split) close();
        return void span('comm', start, name, a);
      }
      case 'recv-act':
      case 'recv-grad': {
        const host = await this.p2p.recv(new Float32Array(size), a.peer!);
        span('idle', start, `wait ${name}`, a);
        const got = wallMs();
        if (a.kind === 'recv-grad') slot.dOut = host;
        else {
          slot.input = slot.tape.alloc(shape, `pp.act${a.micro}@${a.stage}`);
          gpu.write(slot.input, host);
          slot.tape.requireGrad(slot.input);
        }
        return void span('comm', got, name, a);
      }
    }
  }

  /** Same-rank hand-off (p = 1, v > 1): stage s−1's output becomes stage s's input leaf by a GPU copy. */
  private handOver(prev: Slot | undefined, slot: Slot, shape: number[]): void {
    if (!prev?.output) return;
    slot.input = slot.tape.alloc(shape, 'pp.act');
    this.gpu.copy(prev.output, slot.input);
    slot.tape.requireGrad(slot.input);
  }
}
