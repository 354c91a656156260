/**
 * A recurrent-depth transformer (Geiping et al., "Scaling up Test-Time Compute with Latent
 * Reasoning: A Recurrent Depth Approach", arXiv 2502.05171; docs/design.md#recurrent-depth): a prelude of P
 * GPT blocks embeds the input into e, a core of R GPT blocks is iterated r times on a latent state
 * with e injected at every iteration, and a coda of Q blocks and the tied LM head read the final
 * state. r is drawn per training step (recurrence.ts) and chosen freely at test time
 * (`--eval-iterations`): more iterations, more compute per token, same parameters.
 *
 * As pieces (docs/design.md#one-model-many-contexts) the model has P + 1 + Q blocks: the prelude's, ONE block that
 * runs all r iterations of the core, and the coda's. Parameter names put every core weight under
 * the core's block index (`transformer.h.P.core.j.*`, `transformer.h.P.adapter.*`), so GPT's
 * piece rule, DDP's per-layer buckets and ZeRO's units see the core as one layer.
 *
 * Against the paper: GPT's pre-LayerNorm blocks and learned positions instead of its sandwich
 * norms and RoPE; s₀ = 0 instead of s₀ ~ N(0, σ²) (deterministic on every rank and evaluation);
 * the adapter's (C, 2C) matrix is kept as its two (C, C) halves A_s, A_e, so A_e·e, the same in
 * every iteration, is computed once.
 */
import type { Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { add } from '../autograd/ops.ts';
import type { Tape } from '../autograd/tape.ts';
import type { ParamSpec, Placement } from '../nn/params.ts';
import { GPT, type GPTConfig, gptParamSpecs } from './gpt.ts';
import type { ModelContext } from './context.ts';
import type { VariableDepth } from './recurrence.ts';

/** GPT's shape with nLayer = P + R + Q distinct blocks, plus the recurrence. */
export interface RecurrentDepthConfig extends GPTConfig {
  /** Prelude blocks P (≥ 0). */
  preludeLayers: number;
  /** Coda blocks Q (≥ 0); the core has R = nLayer − P − Q ≥ 1 blocks. */
  codaLayers: number;
  /** Mean r̄ of the training iterations (what flopsPerToken counts). */
  recurIters: number;
  /** k: gradients flow through the last k iterations of a training forward only. */
  recurBackprop: number;
  /** Input injection through the adapter; false: s₀ = e and the core reads the state alone. */
  recurInject: boolean;
  /** r of evaluation and sampling forwards (≥ 1). */
  evalIterations: number;
}

/**
 * Parameter declarations: GPT's for nLayer = P + R + Q blocks (the same draws, in the same order,
 * as a plain GPT of that depth), the core's renamed under block P, then the adapter halves
 * A_s, A_e (C, C) with std √(2/(5C)) — the paper's small init, at which A·[s; e] keeps the scale of
 * its inputs (gain ≈ √(4/5)) so the state neither explodes nor vanishes over iterations.
 */
export function recurrentDepthParamSpecs(cfg: RecurrentDepthConfig): ParamSpec[] {
  const { preludeLayers: P, nLayer: L, codaLayers: Q, nEmbd: C } = cfg, R = L - P - Q;
  const rename = (name: string) => {
    const m = /^transformer\.h\.(\d+)\.(.*)$/.exec(name);
    if (!m) return name;
    const i = Number(m[1]);
    if (i < P) return name;
    return i < P + R ? `transformer.h.${P}.core.${i - P}.${m[2]}` : `transformer.h.${i - R + 1}.${m[2]}`;
  };
  const specs = gptParamSpecs(cfg).map((s) => ({ ...s, name: rename(s.name) }));
  if (cfg.recurInject) {
    const std = Math.sqrt(2 / (5 * C)), at = specs.findIndex((s) => s.name === 'transformer.ln_f.weight');
    specs.splice(
      at,
      0,
      ...['state', 'embed'].map((half) => ({
        name: `transformer.h.${P}.adapter.${half}.weight`,
        shape: [C, C],
        init: { kind: 'normal' as const, std },
        decay: true,
      })),
    );
  }
  return specs;
}

/**
 * Checks the recurrence's shape. @throws Error naming the rule: R = nLayer − P − Q ≥ 1, P, Q ≥ 0,
 * r̄, k and the evaluation r positive integers.
 */
export function validateRecurrentDepth(cfg: RecurrentDepthConfig): void {
  const { nLayer: L, preludeLayers: P, codaLayers: Q } = cfg;
  for (const k of ['preludeLayers', 'codaLayers'] as const) {
    if (!Number.isInteger(cfg[k]) || cfg[k] < 0) {
      throw new Error(`recurrent-depth: ${k} must be an integer ≥ 0, got ${cfg[k]}`);
    }
  }
  for (const k of ['recurIters', 'recurBackprop', 'evalIterations'] as const) {
    if (!Number.isInteger(cfg[k]) || cfg[k] < 1) {
      throw new Error(`recurrent-depth: ${k} must be a positive integer, got ${cfg[k]}`);
    }
  }
  if (L - P - Q < 1) {
    throw new Error(
      `recurrent-depth: nLayer (${L}) must be at least preludeLayers + codaLayers + 1 = ${P + Q + 1} (one core block)`,
    );
  }
}

export class RecurrentDepth extends GPT implements VariableDepth {
  override readonly arch: string = 'recurrent-depth';
  /** Core blocks R. */
  readonly coreLayers: number;
  /** r of the next forwards: the evaluation r, except inside a training step (recurrence.ts withTrainDepth). */
  iterations: number;
  readonly evalIterations: number;

  /**
   * Weights from `seed`; with `place`, a rank's placement (nn/params.ts placeSpecs).
   * @throws Error from {@link validateRecurrentDepth} or GPT's shape check.
   */
  constructor(gpu: Gpu, override readonly cfg: RecurrentDepthConfig, seed: number, place?: Placement) {
    validateRecurrentDepth(cfg);
    // As pieces: P prelude blocks, the whole core as one block, Q coda blocks.
    super(gpu, { ...cfg, nLayer: cfg.preludeLayers + 1 + cfg.codaLayers }, seed, place, recurrentDepthParamSpecs(cfg));
    this.coreLayers = cfg.nLayer - cfg.preludeLayers - cfg.codaLayers;
    this.iterations = this.evalIterations = cfg.evalIterations;
  }

  /** Piece i on x (B·T, C): prelude block i < P, the core's r iterations at i = P, coda blocks after. */
  override block(ctx: ModelContext, tape: Tape, x: Tensor, i: number, b: number, t: number): Promise<Tensor> {
    if (i === this.cfg.preludeLayers) return this.core(ctx, tape, x, b, t);
    return this.blockAt(ctx, tape, x, i, `transformer.h.${i}`, b, t);
  }

  /**
   * The core iterated r = {@link iterations} times on the prelude's output e (B·T, C):
   * sᵢ = Core(A_s·sᵢ₋₁ + A_e·e) from s₀ = 0 with injection, sᵢ = Core(sᵢ₋₁) from s₀ = e without;
   * returns s_r (B·T, C). On a recording tape only the last k iterations are recorded (truncated
   * backprop, docs/design.md#recurrent-depth): the earlier ones run on throw-away non-recording tapes, one at a time,
   * so their activations are freed at once and no gradient reaches the core, the adapter or e through them. Evaluation
   * runs every iteration that way (memory of one iteration for any r).
   * @throws Error when r is not a positive integer.
   */
  private async core(ctx: ModelContext, tape: Tape, e: Tensor, b: number, t: number): Promise<Tensor> {
    const { preludeLayers: P, recurBackprop: k, recurInject: inject } = this.cfg, r = this.iterations;
    if (!Number.isInteger(r) || r < 1) {
      throw new Error(`recurrent-depth: core iterations must be a positive integer, got ${r}`);
    }
    const h = `transformer.h.${P}`, w = (n: string) => this.p(`${h}.adapter.${n}.weight`);
    const ue = inject ? await ctx.linear(tape, e, `${h}.adapter.embed`, w('embed'), null, `${h}.adapter.embed`) : null;
    const detached = tape.recording ? Math.max(0, r - k) : r;
    let s = e, held: Tensor | null = null;
    for (let j = 0; j < r; j++) {
      const free = j < detached, on = free ? tape.child(false) : tape;
      // A recomputed segment (checkpoint.ts) learns which parameters it reads through its observer.
      if (free) on.observer = tape.observer;
      // s₀ = 0: the first iteration's A_s·s₀ vanishes, so its core input is A_e·e alone.
      let x = !inject ? s : j === 0 ? ue! : add(
        on,
        await ctx.linear(on, s, `${h}.adapter.state`, w('state'), null, `${h}.adapter.state`),
        ue!,
        `${h}.inject`,
      );
      for (let c = 0; c < this.coreLayers; c++) x = await this.blockAt(ctx, on, x, P, `${h}.core.${c}`, b, t);
      if (free) {
        held ??= tape.alloc(x.shape, `${h}.state`);
        this.gpu.copy(x, held);
        on.dispose();
        x = held;
      }
      s = x;
    }
    return s;
  }

  /** Core parameters N_core (its R blocks) and adapter parameters (2C² with injection, else 0). */
  private counts(): { core: number; adapter: number } {
    let core = 0, adapter = 0;
    for (const p of this.params.params) {
      if (p.name.includes('.core.')) core += p.size;
      else if (p.name.includes('.adapter.')) adapter += p.size;
    }
    return { core, adapter };
  }

  /**
   * Forward FLOPs per token at r iterations and sequence length t: 2 per weight of the prelude,
   * coda, head and A_e; 2r per weight of the core and A_s; attention 4·C·t per block application.
   */
  forwardFlopsPerToken(t: number, r: number): number {
    const { core, adapter } = this.counts(), C = this.cfg.nEmbd, P = this.cfg.preludeLayers, Q = this.cfg.codaLayers;
    const outer = this.numParams() - core - adapter;
    return 2 * (outer + adapter / 2) + 2 * r * (core + adapter / 2) + 4 * C * t * (P + Q + this.coreLayers * r);
  }

  /**
   * Training FLOPs per token (docs/design.md#recurrent-depth): the forward of E[r] = r̄ core applications, the backward
   * (2× a forward) of min(r̄, k) of them — E[min(r, k)] approximated by min(E[r], k) — and of everything outside the
   * core once.
   */
  override flopsPerToken(t: number): number {
    const rbar = this.cfg.recurIters, kbar = Math.min(rbar, this.cfg.recurBackprop);
    const { core, adapter } = this.counts(), C = this.cfg.nEmbd, P = this.cfg.preludeLayers, Q = this.cfg.codaLayers;
    const outer = this.numParams() - core - adapter, perIter = core + adapter / 2;
    return 6 * (outer + adapter / 2) + (2 * rbar + 4 * kbar) * perIter +
      4 * C * t * (3 * (P + Q) + this.coreLayers * (rbar + 2 * kbar));
  }

  override describe(): string {
    const { preludeLayers: P, codaLayers: Q, nHead, nEmbd, blockSize, recurIters, recurBackprop } = this.cfg;
    return `recurrent-depth · prelude ${P} · core ${this.coreLayers} × r (train mean ${recurIters}, backprop last ${recurBackprop}; eval ${this.evalIterations}) · coda ${Q} · ${nHead} heads · width ${nEmbd} · block ${blockSize}${
      this.cfg.recurInject ? '' : ' · no injection'
    }`;
  }
}
