/**
 * A gradient tape over GPU tensors. Forward ops (ops.ts) record one node each; `backward`
 * walks the nodes in reverse and applies the op's vector-Jacobian product from the rule
 * table (rules.ts), whose type makes a missing rule a compile error (tinygrad/jax-js style).
 *
 * Gradients accumulate: every backward kernel adds into its gradient buffer, so a tensor
 * consumed twice (the residual stream) gets the sum, and parameter gradients sum over
 * micro-batches until the optimizer zeroes them. Nothing here reads the GPU back.
 */
import type { Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import type { TokenIndex } from '../kernels/embedding.ts';
import type { Conv1dDims, LinearAttentionDims, ScanDims } from './mixer_ops.ts';
import type { MoERecords } from './moe_ops.ts';

/** Attention geometry: batch, sequence, width, heads. */
export interface AttnDims {
  b: number;
  t: number;
  c: number;
  nh: number;
  causal?: boolean;
}

/** What each op saves for its backward pass. Adding an op here forces a rule in rules.ts. */
export interface OpRecords {
  /** y (N, Cout) = x (N, Cin) · wᵀ (Cin, Cout) + b (Cout) */
  linear: { x: Tensor; w: Tensor; b: Tensor | null; y: Tensor; n: number; cin: number; cout: number };
  /** y (n, C) = rows [r0, r0+n) of x (N, C), a view of x's memory (no copy); see ops.ts rowSlice */
  rowSlice: { x: Tensor; y: Tensor; r0: number; n: number; c: number };
  /** y = a + b */
  add: { a: Tensor; b: Tensor; y: Tensor };
  /** y = GELU(x) */
  gelu: { x: Tensor; y: Tensor };
  /** y (N, C) = LayerNorm(x) · w + b, with saved mean and rstd (N) */
  layerNorm: { x: Tensor; w: Tensor; b: Tensor; y: Tensor; mean: Tensor; rstd: Tensor };
  /** y (B, T, C) = causal self-attention of qkv (B, T, 3C); att (B, nh, T, T) saved */
  attention: { qkv: Tensor; y: Tensor; att: Tensor; dims: AttnDims };
  /** y (B, T, C) = FlashAttention-2 of qkv (B, T, 3C); only lse (B, nh, T) saved */
  flashAttention: { qkv: Tensor; y: Tensor; lse: Tensor; dims: AttnDims };
  /** y (B, T, C) = wte[tokens] + wpe[0:T] */
  embedding: { index: TokenIndex; wte: Tensor; wpe: Tensor; y: Tensor; b: number; t: number };
  /** loss (2) = [mean cross-entropy of logits (N, V) against targets (N), count]; terminal */
  crossEntropy: { logits: Tensor; targets: Tensor; lse: Tensor; loss: Tensor; gradScale: number };
  /** y (N, C) = x · rstd · w (RMSNorm), rstd (N) saved */
  rmsNorm: { x: Tensor; w: Tensor; y: Tensor; rstd: Tensor; eps: number };
  /** y = x·σ(x) */
  silu: { x: Tensor; y: Tensor };
  /** y = σ(x) */
  sigmoid: { x: Tensor; y: Tensor };
  /** y = relu(x)² */
  reluSquared: { x: Tensor; y: Tensor };
  /** y = scale·logσ(x) */
  logSigmoid: { x: Tensor; y: Tensor; scale: number };
  /** y = a ∘ b */
  mul: { a: Tensor; b: Tensor; y: Tensor };
  /** y (B, T, C) = x shifted one step along T, zero at t = 0 */
  tokenShift: { x: Tensor; y: Tensor; b: number; t: number };
  /** y (N, C) = a + μ ∘ (b − a), μ (C) */
  lerp: { a: Tensor; b: Tensor; mu: Tensor; y: Tensor };
  /** y (N, C) = x ∘ s, s (C) */
  scaleChannels: { x: Tensor; s: Tensor; y: Tensor };
  /** o (B, T, H·V) = chunked scalar-decay linear attention; chunk-boundary states saved (mixer_ops.ts) */
  linearAttention: { q: Tensor; k: Tensor; v: Tensor; g: Tensor; o: Tensor; states: Tensor; dims: LinearAttentionDims };
  /** o (B, T, H·V) = per-channel-decay recurrence with bonus u (RWKV-6 / GLA) */
  recurrentLinearAttention: {
    q: Tensor;
    k: Tensor;
    v: Tensor;
    w: Tensor;
    u: Tensor | null;
    o: Tensor;
    dims: LinearAttentionDims;
  };
  /** out (B, T, D) = Mamba selective scan, gated by silu(z); chunk-boundary states saved */
  selectiveScan: {
    u: Tensor;
    delta: Tensor;
    A: Tensor;
    Bm: Tensor;
    Cm: Tensor;
    D: Tensor;
    bias: Tensor;
    z: Tensor | null;
    out: Tensor;
    states: Tensor;
    dims: ScanDims;
  };
  /** y (B, T, D) = causal depthwise conv1d of x with w (D, K) and bias (D) */
  conv1d: { x: Tensor; w: Tensor; bias: Tensor; y: Tensor; dims: Conv1dDims };
  /**
   * y = a communication step between ranks (collective.ts): Megatron's f/g operators,
   * sequence-parallel gathers, Ulysses and MoE all-to-alls. `backward` maps dy to dx on the
   * host and runs the conjugate collective; it is asynchronous, so only backwardAsync runs it.
   */
  collective: { x: Tensor; y: Tensor; name: string; backward: (dy: Float32Array) => Promise<Float32Array> };
  /**
   * y = a recomputed segment (checkpoint.ts): the forward kept only x and y; `recompute` runs
   * the segment again on a tape of its own, backpropagates dy through it into dx and the
   * parameters, and frees it. `touched`: every tensor the segment's ops read (its parameters
   * among them), for bookkeeping that asks which parameters a node accumulates into.
   */
  checkpoint: {
    x: Tensor;
    y: Tensor;
    name: string;
    touched: Tensor[];
    recompute: (dy: Tensor | null, dx: Tensor | null) => Promise<void>;
  };
  /** Mixture-of-experts ops (moe_ops.ts): router softmax and gates, dispatch / combine gathers, per-expert Linear, load-balancing loss */
  moeSoftmax: MoERecords['moeSoftmax'];
  moeGates: MoERecords['moeGates'];
  moeDispatch: MoERecords['moeDispatch'];
  moeCombine: MoERecords['moeCombine'];
  moeExpertLinear: MoERecords['moeExpertLinear'];
  moeAuxLoss: MoERecords['moeAuxLoss'];
}

export type OpName = keyof OpRecords;
export type Node = { [K in OpName]: { op: K } & OpRecords[K] }[OpName];

/** What a rule sees: the output gradient and where to accumulate input gradients. */
export interface GradContext {
  gpu: Gpu;
  /** Gradient of an op output, or null when nothing flowed into it. */
  grad(t: Tensor): Tensor | null;
  /** The buffer to accumulate t's gradient into (zeroed on first use), or null if t needs none. */
  acc(t: Tensor): Tensor | null;
}

/** One VJP per op; the mapped type makes the table exhaustive. Communication rules are asynchronous. */
export type RuleTable = { [K in OpName]: (g: GradContext, r: OpRecords[K]) => void | Promise<void> };

export class Tape {
  private nodes: { node: Node; outputs: readonly Tensor[] }[] = [];
  private readonly paramGrads: ReadonlyMap<Tensor, Tensor>;
  private readonly paramIds: Set<number>;
  private temps: Tensor[] = [];
  private grads = new Map<number, Tensor>();
  private needsGrad = new Set<number>();
  private disposers: (() => void)[] = [];

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
  alloc(shape: readonly number[], label = ''): Tensor {
    const t = this.gpu.empty(shape, 'f32', label);
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

  /** The accumulated gradient of a leaf or parameter after backward, or null when none flowed. */
  gradOf(t: Tensor): Tensor | null {
    return this.grads.get(t.id) ?? null;
  }

  /**
   * A new tape over the same parameters and their gradients (a recomputed segment's), recording
   * or not (the forward of a segment whose activations are dropped).
   */
  child(recording: boolean): Tape {
    return new Tape(this.gpu, this.paramGrads, recording);
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
    // Refuse before any rule runs: a half-run backward would leave peers inside a collective.
    const comm = this.nodes.find((n) => n.node.op === 'collective' || n.node.op === 'checkpoint');
    if (comm) {
      throw new Error(
        `backward(): the tape holds a ${comm.node.op} ('${
          (comm.node as { name: string }).name
        }'), whose rule is asynchronous; call backwardAsync()`,
      );
    }
    for (const step of this.steps(rules, onNodeDone)) {
      const pending = step.run();
      if (pending) {
        pending.catch(() => {}); // the error below replaces it
        throw new Error(`backward(): '${step.op}' is a collective, whose rule is asynchronous; call backwardAsync()`);
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
    for (const step of this.steps(rules, onNodeDone)) {
      await beforeNode?.(step.node);
      await step.run();
      step.done();
    }
  }

  /** The nodes in reverse order, each as its rule (`run`) and the release that follows it (`done`). */
  private *steps(
    rules: RuleTable,
    onNodeDone?: (node: Node) => void,
  ): Generator<{ op: OpName; node: Node; run(): void | Promise<void>; done(): void }> {
    if (!this.recording) throw new Error('backward() on a tape that was not recording (evaluation mode)');
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
        run: () => (rules[node.op] as (g: GradContext, r: Node) => void | Promise<void>)(ctx, node),
        done: () => {
          // Every consumer of these outputs came later on the tape and has already added into
          // their gradients; the producer's rule was the last reader, so the memory can go back.
          for (const o of outputs) {
            const g = this.grads.get(o.id);
            if (g && !this.paramIds.has(o.id)) {
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
    for (const t of this.temps) t.release();
    for (const fn of this.disposers) fn();
    this.temps = [];
    this.disposers = [];
    this.nodes = [];
    this.grads.clear();
  }
}
