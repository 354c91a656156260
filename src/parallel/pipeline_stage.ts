/**
 * The pipeline-parallel cut of nanoGPT (src/models/gpt.ts): the nLayer blocks split evenly into
 * S = p·v stages, stage s on pipeline rank s mod p (pipeline_schedule.ts's layout). Stage 0 also
 * owns the embedding (wte, wpe); stage S−1 owns ln_f and the LM head, whose weight is tied to
 * wte. As in Megatron-LM (`module.py` `initialize_word_embeddings`, `shared_embedding_or_output_weight`),
 * the last rank keeps its own copy of wte for the head when it is not the first rank; the two
 * copies start equal and stay equal because their gradients are summed over the "embedding group"
 * {first, last} every step (pipeline.ts).
 *
 * Initialisation: every rank draws the whole model's weights host-side from the seed in
 * gptParamSpecs order (exactly what ParamStore does for the single-rank GPT) and keeps the
 * parameters of its own stages, so a pipeline run starts from the single-rank run's weights.
 * Parameter names are nanoGPT's; the head's copy of wte is also `transformer.wte.weight`.
 */
import type { Gpu } from '../gpu/context.ts';
import { Tensor } from '../gpu/tensor.ts';
import { add, attention, crossEntropy, embedding, flashAttention, gelu, layerNorm, linear } from '../autograd/ops.ts';
import type { Tape } from '../autograd/tape.ts';
import { type ParamSpec, ParamStore } from '../nn/params.ts';
import { type GPTConfig, gptParamSpecs, validateGPTConfig } from '../models/gpt.ts';
import { Random } from '../util/random.ts';

export const WTE = 'transformer.wte.weight';

/**
 * Checks that nLayer blocks split evenly into p·v stages.
 * @throws Error naming nLayer, p and v when they do not (or when p, v are not positive integers).
 */
export function checkPipelineSplit(nLayer: number, p: number, v = 1): void {
  for (const [k, x] of [['pp', p], ['virtual stages', v]] as const) {
    if (!Number.isInteger(x) || x < 1) throw new Error(`pipeline: ${k} must be a positive integer, got ${x}`);
  }
  if (nLayer % (p * v)) {
    throw new Error(`pipeline: nLayer (${nLayer}) must be divisible by pp·v (${p}·${v} = ${p * v}) so every stage holds the same number of blocks`);
  }
}

/** Blocks [lo, hi) of stage `stage` out of S (nLayer divisible by S; see checkPipelineSplit). */
export function stageLayers(nLayer: number, S: number, stage: number): [number, number] {
  const per = nLayer / S;
  return [stage * per, (stage + 1) * per];
}

/**
 * The full model's initial weights by name, drawn host-side exactly as ParamStore draws them
 * for `new GPT(gpu, cfg, seed)` (declaration order, one standard normal per 'normal' element).
 */
export function gptInitialWeights(cfg: GPTConfig, seed: number): Map<string, Float32Array> {
  const rng = new Random(seed);
  const out = new Map<string, Float32Array>();
  for (const s of gptParamSpecs(cfg)) {
    const a = new Float32Array(s.shape.reduce((x, y) => x * y, 1));
    const init = s.init;
    for (let j = 0; j < a.length; j++) a[j] = init.kind === 'normal' ? rng.normal() * init.std : init.kind === 'const' ? init.value : init.at(j);
    out.set(s.name, a);
  }
  return out;
}

/**
 * What the pipeline executor (pipeline.ts) needs from one rank's stages: the pluggable block
 * computation. GPTPipelineStages implements it for whole layers; mesh_stage.ts for
 * tensor-parallel shards of them. Every method may return a promise (tensor-parallel pieces
 * communicate inside their forward).
 */
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
  /** Stage `stage`'s blocks on its input activation. */
  blocks(tape: Tape, x: Tensor, stage: number, b: number, t: number): Tensor | Promise<Tensor>;
  /** The last stage's loss (2) = [mean cross-entropy, count] vs host targets (b·t), its gradient seeded with gradScale. */
  head(tape: Tape, x: Tensor, hostTargets: Int32Array, gradScale: number): Tensor | Promise<Tensor>;
}

/** Which of gpt.ts's parameters one pipeline rank holds, and whether it keeps the head's wte copy. */
export interface StageSelection {
  /** Global stage indices held by this rank, ascending. */
  stages: number[];
  /** The rank's parameter specs in store order (the head's wte copy last when `headCopy`). */
  specs: ParamSpec[];
  /** True when this rank holds the head's copy of wte (last rank ≠ first rank). */
  headCopy: boolean;
}

/**
 * The parameters of pipeline rank `rank` of `pp` with `v` chunks (see the module doc): its
 * stages' blocks, wte + wpe on the first stage, ln_f on the last, plus the head's wte copy.
 * @throws Error from {@link checkPipelineSplit} or for a rank outside 0…pp−1.
 */
export function selectStageParams(cfg: GPTConfig, rank: number, pp: number, v = 1): StageSelection {
  checkPipelineSplit(cfg.nLayer, pp, v);
  if (!Number.isInteger(rank) || rank < 0 || rank >= pp) throw new Error(`pipeline: rank ${rank} is outside 0…${pp - 1}`);
  const S = pp * v;
  const stages = [...Array(v).keys()].map((c) => c * pp + rank);
  const mine = new Set<number>(stages.flatMap((s) => {
    const [lo, hi] = stageLayers(cfg.nLayer, S, s);
    return [...Array(hi - lo).keys()].map((i) => lo + i);
  }));
  const first = rank === 0, last = (S - 1) % pp === rank;
  const keep = (s: ParamSpec) => {
    const block = /^transformer\.h\.(\d+)\./.exec(s.name);
    if (block) return mine.has(Number(block[1]));
    if (s.name.startsWith('transformer.ln_f.')) return last;
    return first; // wte, wpe
  };
  const all = gptParamSpecs(cfg);
  const specs = all.filter(keep);
  const headCopy = last && !first;
  // Last in the store, so a grad norm can skip it with one slice (it duplicates stage 0's wte).
  if (headCopy) specs.push(all.find((s) => s.name === WTE)!);
  return { stages, specs, headCopy };
}

/**
 * One pipeline rank's share of a GPT: the parameters of stages rank, rank+p, …, rank+(v−1)p in
 * one ParamStore, and the forward pieces each stage runs (embedding, its blocks, the head).
 */
export class GPTPipelineStages implements PipelineStageModel {
  readonly params: ParamStore;
  readonly gradMap: Map<Tensor, Tensor>;
  /** Global stage indices held by this rank, ascending. */
  readonly stages: number[];
  /** Total stages S = p·v. */
  readonly S: number;
  /** True when this rank holds the head's copy of wte (last rank ≠ first rank); it is the store's last parameter. */
  readonly headCopy: boolean;
  private readonly p: (name: string) => Tensor;

  /**
   * @param rank pipeline rank in 0…p−1.
   * @throws Error from {@link checkPipelineSplit} or validateGPTConfig, or for a rank outside 0…p−1.
   */
  constructor(readonly gpu: Gpu, readonly cfg: GPTConfig, seed: number, readonly rank: number, readonly pp: number, readonly v = 1) {
    validateGPTConfig(cfg);
    const sel = selectStageParams(cfg, rank, pp, v);
    this.S = pp * v;
    this.stages = sel.stages;
    this.headCopy = sel.headCopy;
    const init = gptInitialWeights(cfg, seed);
    this.params = new ParamStore(gpu, sel.specs.map((s) => ({ ...s, init: { kind: 'values', at: (j: number) => init.get(s.name)![j] } })), () => {
      throw new Error('pipeline stages draw no random numbers of their own');
    });
    this.gradMap = this.params.gradMap();
    this.p = (name) => this.params.get(name).value;
  }

  /** (b, t, C): whole activations travel between stages. */
  actShape(b: number, t: number): number[] {
    return [b, t, this.cfg.nEmbd];
  }

  /** Whether this rank runs global stage `s`. */
  holds(s: number): boolean {
    return s >= 0 && s < this.S && s % this.pp === this.rank;
  }

  /** Stage 0's input: x (B, T, C) = wte[tokens] + wpe[0:T], tokens (B·T) host ids. */
  embed(tape: Tape, hostTokens: Int32Array, b: number, t: number): Tensor {
    const tokens = this.gpu.upload(hostTokens, [b, t], 'i32', 'pp.tokens');
    tape.onDispose(() => tokens.release());
    return embedding(tape, tokens, hostTokens, this.p(WTE), this.p('transformer.wpe.weight'), b, t);
  }

  /**
   * Stage `stage`'s blocks on x (B, T, C), in gpt.ts's op order so the numbers match the
   * single-rank forward. Returns the residual stream (B·T, C).
   */
  blocks(tape: Tape, x: Tensor, stage: number, b: number, t: number): Tensor {
    const { nHead: nh, nEmbd: c, bias } = this.cfg;
    const p = this.p, pb = (name: string) => (bias ? p(name) : null);
    const [lo, hi] = stageLayers(this.cfg.nLayer, this.S, stage);
    for (let i = lo; i < hi; i++) {
      const h = `transformer.h.${i}`;
      const a = layerNorm(tape, x, p(`${h}.ln_1.weight`), p(`${h}.ln_1.bias`), `${h}.ln_1`);
      const qkv = linear(tape, a, p(`${h}.attn.c_attn.weight`), pb(`${h}.attn.c_attn.bias`), `${h}.c_attn`);
      const attn = this.cfg.attention === 'naive' ? attention : flashAttention;
      const y = attn(tape, qkv, { b, t, c, nh }, `${h}.attn`);
      const proj = linear(tape, y, p(`${h}.attn.c_proj.weight`), pb(`${h}.attn.c_proj.bias`), `${h}.c_proj`);
      x = add(tape, x, proj, `${h}.res1`);
      const m = layerNorm(tape, x, p(`${h}.ln_2.weight`), p(`${h}.ln_2.bias`), `${h}.ln_2`);
      const up = gelu(tape, linear(tape, m, p(`${h}.mlp.c_fc.weight`), pb(`${h}.mlp.c_fc.bias`), `${h}.c_fc`), `${h}.gelu`);
      const down = linear(tape, up, p(`${h}.mlp.c_proj.weight`), pb(`${h}.mlp.c_proj.bias`), `${h}.mlp_proj`);
      x = add(tape, x, down, `${h}.res2`);
    }
    return x;
  }

  /** The last stage's head: loss (2) = [mean cross-entropy of LM_head(ln_f(x)) vs targets (B·T host ids), count]. */
  head(tape: Tape, x: Tensor, hostTargets: Int32Array, gradScale: number): Tensor {
    const targets = this.gpu.upload(hostTargets, [hostTargets.length], 'i32', 'pp.targets');
    tape.onDispose(() => targets.release());
    const xf = layerNorm(tape, x, this.p('transformer.ln_f.weight'), this.p('transformer.ln_f.bias'), 'ln_f');
    const logits = linear(tape, xf, this.p(WTE), null, 'lm_head');
    return crossEntropy(tape, logits, targets, gradScale);
  }

  /** Flat-gradient slice that the global grad norm counts: everything but the head's copy of wte (Megatron skips shared copies too). */
  normGrads(): Tensor {
    const { params } = this;
    if (!this.headCopy) return params.grads;
    // The copy is the last parameter and ln_f precedes it, so the slice is never empty.
    const len = params.params[params.params.length - 1].offset;
    return new Tensor(this.gpu, params.grads.buffer, [len], 'f32', params.grads.offset, false, `grads[0:${len}]`);
  }
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
  tape.record({
    op: 'collective', x: y, y: marker, name: 'pp.sendForward',
    backward: () => {
      const g = received();
      if (g.length !== y.size) throw new Error(`pp.sendForward: received gradient of ${g.length} elements for an output of ${y.size}`);
      return Promise.resolve(g);
    },
  }, [y], [marker]);
}
