/**
 * The backward split into B and W (Qi et al., "Zero Bubble Pipeline Parallelism", arXiv
 * 2401.10241; docs/design.md#split-backward-b-and-w): phase B walks the tape computing only the
 * gradients that flow to activations, so a pipeline stage can send its input gradient early; the
 * parameters' gradients are deferred to phase W, which a zero-bubble schedule runs in the bubble.
 * The rules themselves are the fused ones (rules.ts); this module decides, per node, which of the
 * gradients a rule computes in each phase.
 */
import { DTYPE_BYTES, Tensor } from '../gpu/tensor.ts';
import type { Gpu } from '../gpu/context.ts';
import { axpy } from '../kernels/elementwise.ts';
import type { GradContext, Node, OpName, RuleTable } from './records.ts';
import type { Tape } from './tape.ts';

/**
 * Ops whose rule computes each input's gradient on its own (a null `acc` skips exactly that
 * input's kernels), so running the rule twice — B with the parameters masked, W with everything
 * else masked — does the fused rule's work once: a linear's dX = dY·W in B and dW = dYᵀ·X, db in
 * W; the embedding's table gradients all in W. The other ops with a parameter input run a kernel
 * that yields every gradient in one pass (LayerNorm, conv1d, the scans): there B computes the
 * parameters' gradients into buffers of their own and W adds them in, since deferring the work
 * would run the reverse scan twice. A recomputed segment runs B on its own tape, kept for W.
 */
export const SEPARABLE: ReadonlySet<OpName> = new Set<OpName>([
  'linear',
  'moeExpertLinear',
  'embedding',
  'rmsNorm',
  'mul',
  'lerp',
  'scaleChannels',
  'add',
  'rowSlice',
  // One input: when it is a parameter (Mamba's A_log through logSigmoid) all of the rule is W's.
  'logSigmoid',
  'silu',
  'sigmoid',
  'reluSquared',
  'gelu',
]);

type Rule = (g: GradContext, r: Node) => void | Promise<void>;

/**
 * The deferred W work of one tape and the tensors it keeps alive between B and W.
 * @param paramIds the tape's parameters (their gradients are W's); `casts` its operand casts by
 *   source id (a parameter's half precision copy is never counted as held); `mayFree` whether the
 *   tape frees an output's gradient after its node (not a parameter's, not a borrowed one).
 */
export class SplitBackward {
  /** W's work per node, in B's order (the fused backward's); a node with none still marks its parameters final. */
  private readonly work: { node: Node; fns: (() => void)[] }[] = [];
  /** Tensors W reads, by id: output gradients kept past their node, scratch, saved activations. */
  private readonly held = new Map<number, Tensor>();
  /** Of those, the ones this phase must release after W (the tape would have freed them in B). */
  private readonly owned = new Set<Tensor>();
  private readonly castOfParam: ReadonlySet<number>;
  /** Recomputed segments' tapes after their B, kept whole until W. */
  private readonly children: Tape[] = [];
  private ran = false;

  constructor(
    private readonly gpu: Gpu,
    private readonly paramIds: ReadonlySet<number>,
    casts: ReadonlyMap<number, Tensor>,
    private readonly mayFree: (output: Tensor) => boolean,
  ) {
    this.castOfParam = new Set([...casts].filter(([id]) => paramIds.has(id)).map(([, c]) => c.id));
  }

  private isParam(t: Tensor): boolean {
    return this.paramIds.has(t.id);
  }

  /** Phase B of one node: its rule with the parameters' gradients deferred; W's share is recorded. */
  run(rules: RuleTable, node: Node, outputs: readonly Tensor[], ctx: GradContext): void | Promise<void> {
    this.work.push({ node, fns: [] });
    if (node.op === 'checkpoint') {
      // The recomputed segment runs its own B; its tape (its activations and its W's) waits for
      // W, and so does dy, which it reads in place.
      const dy = ctx.grad(node.y);
      return node.recompute(dy, node.xs.map((x) => ctx.acc(x)), (child) => {
        if (dy) this.hold(dy, this.mayFree(node.y));
        this.children.push(child);
        this.defer(() => {
          child.backwardWeights();
          child.dispose();
        });
      });
    }
    const rule = rules[node.op] as Rule;
    return SEPARABLE.has(node.op) ? this.separable(rule, node, outputs, ctx) : this.fused(rule, node, ctx);
  }

  /** Whether B must not release `t` (an output gradient W still reads). */
  keeps(t: Tensor): boolean {
    return this.owned.has(t);
  }

  /** Bytes of the tensors kept alive for W (each tensor counted once), 0 after W. */
  heldBytes(): number {
    const all = new Map(this.held);
    for (const c of this.children) for (const t of c.keptTensors()) all.set(t.id, t);
    let bytes = 0;
    for (const t of all.values()) bytes += t.size * DTYPE_BYTES[t.dtype];
    return bytes;
  }

  /** The tensors kept for W, recomputed segments' included. */
  heldTensors(): Tensor[] {
    return [...this.held.values(), ...this.children.flatMap((c) => c.keptTensors())];
  }

  /**
   * Phase W: every deferred weight-gradient rule in B's order (the fused backward's), then frees
   * what it held. `onNodeDone` is called after each node's W work, for every node B ran: once it
   * returns, no earlier node of the walk adds to that node's parameters again, as in the fused
   * backward, so gradient buckets (buckets.ts) become final in W, never in B.
   */
  runWeights(onNodeDone?: (node: Node) => void): void {
    for (const run of this.weightSteps(onNodeDone)) run();
  }

  /** {@link runWeights} awaiting `beforeNode` before each node's W work (ZeRO-2 opens the layer's gradient slot). */
  async runWeightsAsync(onNodeDone?: (node: Node) => void, beforeNode?: (node: Node) => Promise<void>): Promise<void> {
    for (const run of this.weightSteps(onNodeDone)) {
      await beforeNode?.(run.node);
      run();
    }
  }

  /** Each node's W work then its `onNodeDone`, in B's order; frees what B held once the last ran. */
  private *weightSteps(onNodeDone?: (node: Node) => void): Generator<(() => void) & { node: Node }> {
    if (this.ran) throw new Error('backwardWeights(): phase W already ran on this tape; it runs once after B');
    this.ran = true;
    for (const { node, fns } of this.work) {
      yield Object.assign(() => {
        for (const w of fns) w();
        onNodeDone?.(node);
      }, { node });
    }
    this.children.length = 0; // each disposed by its own W
    this.release();
  }

  /** Frees what B kept for W (W not run: the tape was disposed in between). */
  release(): void {
    for (const c of this.children.splice(0)) c.dispose();
    for (const t of this.owned) t.release();
    this.work.length = 0;
    this.held.clear();
    this.owned.clear();
  }

  private separable(rule: Rule, node: Node, outputs: readonly Tensor[], ctx: GradContext): void | Promise<void> {
    let wanted = false;
    const b: GradContext = {
      gpu: this.gpu,
      grad: ctx.grad,
      acc: (t) => {
        if (!this.isParam(t)) return ctx.acc(t);
        wanted ||= ctx.acc(t) !== null;
        return null;
      },
    };
    const pending = rule(b, node);
    if (!wanted) return pending;
    const dys = new Map<number, Tensor>();
    for (const o of outputs) {
      const dy = ctx.grad(o);
      if (!dy) continue;
      dys.set(o.id, dy);
      this.hold(dy, this.mayFree(o));
    }
    // The saved activations W's rule reads (X of a linear); parameters and their casts are not activations.
    const outIds = new Set(outputs.map((o) => o.id));
    for (const v of Object.values(node)) {
      if (isTensor(v) && !outIds.has(v.id) && !this.isParam(v) && !this.castOfParam.has(v.id)) this.hold(v, false);
      if (v && typeof v === 'object' && 'x' in v && isTensor(v.x)) this.hold(v.x, false); // autocast's half X
    }
    const w: GradContext = {
      gpu: this.gpu,
      grad: (t) => dys.get(t.id) ?? null,
      acc: (t) => (this.isParam(t) ? ctx.acc(t) : null),
    };
    this.defer(() => void rule(w, node));
    return pending;
  }

  private fused(rule: Rule, node: Node, ctx: GradContext): void | Promise<void> {
    const sinks = new Map<number, [Tensor, Tensor]>();
    const b: GradContext = {
      gpu: this.gpu,
      grad: ctx.grad,
      acc: (t) => {
        if (!this.isParam(t)) return ctx.acc(t);
        let s = sinks.get(t.id);
        if (!s) {
          s = [this.gpu.zeros(t.shape, 'f32', `w.${t.label}`), ctx.acc(t)!];
          sinks.set(t.id, s);
          this.hold(s[0], true);
        }
        return s[0];
      },
    };
    const defer = () => {
      if (sinks.size) this.defer(() => sinks.forEach(([s, g]) => axpy(this.gpu, 1, s, g)));
    };
    const pending = rule(b, node);
    if (pending) return pending.then(defer);
    defer();
  }

  /** Adds W work to the node B is running (the last one {@link run} began). */
  private defer(fn: () => void): void {
    this.work.at(-1)!.fns.push(fn);
  }

  private hold(t: Tensor, own: boolean): void {
    this.held.set(t.id, t);
    if (own) this.owned.add(t);
  }
}

const isTensor = (v: unknown): v is Tensor => v instanceof Tensor;
