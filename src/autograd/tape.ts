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

/** One VJP per op; the mapped type makes the table exhaustive. */
export type RuleTable = { [K in OpName]: (g: GradContext, r: OpRecords[K]) => void };

export class Tape {
  private nodes: { node: Node; outputs: readonly Tensor[] }[] = [];
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

  /** Records a node; its output needs a gradient when any of `inputs` does. */
  record(node: Node, inputs: readonly (Tensor | null)[], outputs: readonly Tensor[]): void {
    if (!this.recording) return;
    if (!inputs.some((t) => t && this.needsGrad.has(t.id)) && node.op !== 'crossEntropy') return;
    for (const o of outputs) this.needsGrad.add(o.id);
    this.nodes.push({ node, outputs });
  }

  /**
   * Applies every rule in reverse order. Call once, after the loss op.
   * @throws Error when called on a non-recording tape or twice.
   */
  backward(rules: RuleTable): void {
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
      // Each op's VJP, dispatched by name; the cast is safe because `node.op` selects both.
      (rules[node.op] as (g: GradContext, r: Node) => void)(ctx, node);
      // Every consumer of these outputs came later on the tape and has already added into
      // their gradients; the producer's rule was the last reader, so the memory can go back.
      for (const o of outputs) {
        const g = this.grads.get(o.id);
        if (g && !this.paramIds.has(o.id)) {
          g.release();
          this.grads.delete(o.id);
        }
      }
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
