/**
 * A gradient tape over GPU tensors. Forward ops (ops.ts) record one node each (records.ts says
 * what each saves); `backward` walks the nodes in reverse and applies the op's vector-Jacobian
 * product from the rule table (rules.ts), whose type makes a missing rule a compile error
 * (tinygrad/jax-js style).
 *
 * Gradients accumulate (a tensor consumed twice gets the sum; parameter gradients sum over
 * micro-batches until the optimizer zeroes them). Nothing here reads the GPU back.
 */
import type { Gpu } from '../gpu/context.ts';
import type { GradContext, Node, OpName, RuleTable } from './records.ts';
import type { DType, Tensor } from '../gpu/tensor.ts';
import type { Autocast } from './autocast.ts';
import { SplitBackward } from './split.ts';

export class Tape {
  private nodes: { node: Node; outputs: readonly Tensor[] }[] = [];
  private readonly paramGrads: ReadonlyMap<Tensor, Tensor>;
  private readonly paramIds: Set<number>;
  private temps: Tensor[] = [];
  private grads = new Map<number, Tensor>();
  private needsGrad = new Set<number>();
  /** Tensors whose gradient buffer belongs to someone else ({@link bindGrad}): never released here. */
  private borrowed = new Set<number>();
  private disposers: (() => void)[] = [];
  /** Mixed precision of the linear layers' matmuls (autocast.ts); null runs them in f32. */
  autocast: Autocast | null = null;
  /** Top-k attention at inference (`--topk-attention`, kernels/select_k.ts): each query's k largest scores; null: all. */
  topk: number | null = null;
  /** Operand casts made on this tape, by source tensor id: a weight read twice is cast once. */
  readonly casts = new Map<number, Tensor>();
  /** The B / W split once {@link backwardInput} ran (split.ts); null for the fused backward. */
  private split: SplitBackward | null = null;

  /**
   * @param paramGrads parameter tensor → its gradient slice (never released by the tape).
   * @param recording false for evaluation: ops run but nothing is recorded.
   */
  constructor(
    readonly gpu: Gpu,
    paramGrads: ReadonlyMap<Tensor, Tensor> = new Map(),
    readonly recording = true,
  ) {
    this.paramGrads = paramGrads;
    this.paramIds = new Set([...paramGrads.keys()].map((p) => p.id));
    for (const [p, g] of paramGrads) {
      this.needsGrad.add(p.id);
      this.grads.set(p.id, g);
    }
  }

  /** A pooled tensor released when the tape is disposed. */
  alloc(shape: readonly number[], label = '', dtype: DType = 'f32'): Tensor {
    const t = this.gpu.empty(shape, dtype, label);
    this.temps.push(t);
    return t;
  }

  /** Runs `fn` on dispose (for non-tensor resources such as token indices). */
  onDispose(fn: () => void): void {
    this.disposers.push(fn);
  }

  /** Whether gradients must flow into t. */
  requiresGrad(t: Tensor): boolean {
    return this.needsGrad.has(t.id);
  }

  /**
   * Makes `t` a leaf whose gradient is wanted although it is no parameter: a pipeline stage's
   * received activation, whose gradient goes back to the previous stage. Read it with
   * {@link gradOf} after backward; the tape allocates it and frees it on dispose.
   */
  requireGrad(t: Tensor): void {
    this.needsGrad.add(t.id);
  }

  /** Whether t is one of the parameters whose gradients this tape accumulates into. */
  isParameter(t: Tensor): boolean {
    return this.paramIds.has(t.id);
  }

  /**
   * Makes `g`, a buffer owned elsewhere, the gradient of `t` on this tape: rules add into it (a
   * leaf) or read it (an output), and the tape never releases it. A recomputed segment
   * (checkpoint.ts) binds its inputs to the caller's gradient buffers and its output to the
   * incoming gradient, so its backward holds no second copy of either.
   */
  bindGrad(t: Tensor, g: Tensor): void {
    if (t.size !== g.size) throw new Error(`bindGrad: gradient of ${g.size} elements for a tensor of ${t.size}`);
    this.needsGrad.add(t.id);
    this.grads.set(t.id, g);
    this.borrowed.add(t.id);
  }

  /** The accumulated gradient of a leaf or parameter after backward, or null when none flowed. */
  gradOf(t: Tensor): Tensor | null {
    return this.grads.get(t.id) ?? null;
  }

  /**
   * A new tape over the same parameters and their gradients (a recomputed segment's), recording
   * or not (the forward of a segment whose activations are dropped).
   */
  child(recording: boolean): Tape {
    const t = new Tape(this.gpu, this.paramGrads, recording);
    t.autocast = this.autocast;
    t.topk = this.topk;
    return t;
  }

  /**
   * Makes `g` the incoming gradient of `t` before {@link backward}: a copy into a buffer of the
   * tape's own, since backward frees an output's gradient once its node is done.
   */
  seed(t: Tensor, g: Tensor): void {
    if (t.size !== g.size) throw new Error(`seed: gradient of ${g.size} elements for a tensor of ${t.size}`);
    const own = this.gpu.empty(t.shape, 'f32', `grad.${t.label}`);
    this.gpu.copy(g, own);
    this.temps.push(own);
    this.grads.set(t.id, own);
  }

  /** Whether {@link backward} would refuse: a collective or a recomputed segment is on the tape (use backwardAsync). */
  get asynchronous(): boolean {
    return this.nodes.some((n) => n.node.op === 'collective' || n.node.op === 'checkpoint');
  }

  /** Sees every node offered to {@link record}, recorded or not (checkpoint.ts collects what a segment reads). */
  observer: ((node: Node) => void) | null = null;

  /** Records a node; its output needs a gradient when any of `inputs` does (a checkpoint's parameters may need one when x does not). */
  record(node: Node, inputs: readonly (Tensor | null)[], outputs: readonly Tensor[]): void {
    this.observer?.(node);
    if (!this.recording) return;
    const always = node.op === 'crossEntropy' ||
      (node.op === 'checkpoint' && node.touched.some((t) => this.paramIds.has(t.id)));
    if (!inputs.some((t) => t && this.needsGrad.has(t.id)) && !always) return;
    for (const o of outputs) this.needsGrad.add(o.id);
    this.nodes.push({ node, outputs });
  }

  /**
   * Applies every rule in reverse order. Call once, after the loss op.
   * @param onNodeDone called after each node's rule is encoded, in backward order; data parallel
   *   uses it to start a gradient bucket's allReduce once no earlier node can add to it.
   * @throws Error when called on a non-recording tape, or when a rule is asynchronous (a
   *   collective or a recomputed segment on the tape needs {@link backwardAsync}).
   */
  backward(rules: RuleTable, onNodeDone?: (node: Node) => void): void {
    this.runSync('backward', () => this.steps(rules, onNodeDone));
  }

  /**
   * Phase B of the split backward (docs/design.md#split-backward-b-and-w): every rule in reverse
   * order, computing only the gradients that flow to activations (a stage input's gradient is
   * complete when it returns); the parameters' gradients are deferred to {@link backwardWeights},
   * which adds exactly what {@link backward} would have. Call once, after the loss op or a seed.
   * @throws Error when B already ran on this tape, on a non-recording tape, or when a rule is
   *   asynchronous (use {@link backwardInputAsync}).
   */
  backwardInput(rules: RuleTable): void {
    this.runSync('backwardInput', () => this.steps(rules, undefined, this.startSplit('backwardInput')));
  }

  /** {@link backwardInput} for tapes with collectives or recomputed segments; `beforeNode` as in {@link backwardAsync}. */
  async backwardInputAsync(rules: RuleTable, beforeNode?: (node: Node) => Promise<void>): Promise<void> {
    await this.runAsync(this.steps(rules, undefined, this.startSplit('backwardInputAsync')), beforeNode);
  }

  /**
   * Phase W: adds every parameter gradient that phase B deferred (matmul dW, biases, norm and
   * embedding tables, the mixers' parameters), in the fused backward's order, and frees what B
   * kept for it ({@link heldForWeights}). Encodes GPU work only; nothing is read back.
   * @param onNodeDone called after each node's W work, in backward order, for every node B ran:
   *   what {@link backward}'s is for the fused walk, so a gradient bucket becomes final here, not in B.
   * @throws Error when phase B has not run on this tape, or W already ran.
   */
  backwardWeights(onNodeDone?: (node: Node) => void): void {
    this.weightPhase().runWeights(onNodeDone);
  }

  /** {@link backwardWeights} awaiting `beforeNode` before each node's W work (ZeRO-2 opens a layer's gradient slot). */
  backwardWeightsAsync(onNodeDone?: (node: Node) => void, beforeNode?: (node: Node) => Promise<void>): Promise<void> {
    return this.weightPhase().runWeightsAsync(onNodeDone, beforeNode);
  }

  private weightPhase(): SplitBackward {
    if (!this.split) throw new Error('backwardWeights(): phase B has not run on this tape; call backwardInput() first');
    return this.split;
  }

  /** Bytes of the tensors kept alive between phase B and phase W (0 before B and after W): see split.ts. */
  heldForWeights(): number {
    return this.split?.heldBytes() ?? 0;
  }

  /** A recomputed segment's tape between its B and W: everything it still holds is kept for W. */
  keptTensors(): Tensor[] {
    return [...this.temps.filter((t) => !t.isReleased), ...(this.split?.heldTensors() ?? [])];
  }

  private startSplit(what: string): SplitBackward {
    if (this.split) throw new Error(`${what}(): phase B already ran on this tape; run backwardWeights() once`);
    const mayFree = (o: Tensor) => !this.paramIds.has(o.id) && !this.borrowed.has(o.id);
    return this.split = new SplitBackward(this.gpu, this.paramIds, this.casts, mayFree);
  }

  /** Runs synchronous rules; refuses (before any rule runs) a tape with an asynchronous one. */
  private runSync(what: string, steps: () => ReturnType<Tape['steps']>): void {
    // Refuse before any rule runs: a half-run backward would leave peers inside a collective.
    const comm = this.nodes.find((n) => n.node.op === 'collective' || n.node.op === 'checkpoint');
    if (comm) {
      throw new Error(
        `${what}(): the tape holds a ${comm.node.op} ('${
          (comm.node as { name: string }).name
        }'), whose rule is asynchronous; call ${what}Async()`,
      );
    }
    for (const step of steps()) {
      const pending = step.run();
      if (pending) {
        pending.catch(() => {}); // the error below replaces it
        throw new Error(`${what}(): '${step.op}' is a collective, whose rule is asynchronous; call ${what}Async()`);
      }
      step.done();
    }
  }

  /**
   * {@link backward} for tapes with collectives on them: awaits each communication rule in turn.
   * @param beforeNode awaited before each node's rule: ZeRO-3 gathers the layer whose weights the rule reads.
   */
  async backwardAsync(
    rules: RuleTable,
    onNodeDone?: (node: Node) => void,
    beforeNode?: (node: Node) => Promise<void>,
  ): Promise<void> {
    await this.runAsync(this.steps(rules, onNodeDone), beforeNode);
  }

  private async runAsync(steps: ReturnType<Tape['steps']>, beforeNode?: (node: Node) => Promise<void>): Promise<void> {
    for (const step of steps) {
      await beforeNode?.(step.node);
      await step.run();
      step.done();
    }
  }

  /** The nodes in reverse order, each as its rule (`run`) and the release that follows it (`done`). */
  private *steps(
    rules: RuleTable,
    onNodeDone?: (node: Node) => void,
    split?: SplitBackward,
  ): Generator<{ op: OpName; node: Node; run(): void | Promise<void>; done(): void }> {
    if (!this.recording) throw new Error('backward() on a tape that was not recording (evaluation mode)');
    if (this.split && !split) throw new Error('backward(): this tape ran phase B; finish it with backwardWeights()');
    const ctx: GradContext = {
      gpu: this.gpu,
      grad: (t) => this.grads.get(t.id) ?? null,
      acc: (t) => {
        if (!this.needsGrad.has(t.id)) return null;
        let g = this.grads.get(t.id);
        if (!g) {
          g = this.gpu.zeros(t.shape, 'f32', `grad.${t.label}`);
          this.grads.set(t.id, g);
          this.temps.push(g);
        }
        return g;
      },
    };
    const nodes = this.nodes;
    this.nodes = [];
    for (let i = nodes.length - 1; i >= 0; i--) {
      const { node, outputs } = nodes[i];
      yield {
        op: node.op,
        node,
        // Each op's VJP, dispatched by name; the cast is safe because `node.op` selects both.
        run: () =>
          split
            ? split.run(rules, node, outputs, ctx)
            : (rules[node.op] as (g: GradContext, r: Node) => void | Promise<void>)(ctx, node),
        done: () => {
          // Every consumer of these outputs came later on the tape and has already added into
          // their gradients; the producer's rule was the last reader, so the memory can go back.
          for (const o of outputs) {
            const g = this.grads.get(o.id);
            if (g && !this.paramIds.has(o.id) && !this.borrowed.has(o.id) && !split?.keeps(g)) {
              g.release();
              this.grads.delete(o.id);
            }
          }
          onNodeDone?.(node);
        },
      };
    }
  }

  /** Releases every temporary (activations, saved tensors, activation gradients). */
  dispose(): void {
    this.split?.release();
    for (const t of this.temps) t.release();
    for (const fn of this.disposers) fn();
    this.temps = [];
    this.casts.clear();
    this.disposers = [];
    this.nodes = [];
    this.grads.clear();
    this.borrowed.clear();
  }
}
