/**
 * A Mamba language model (Gu & Dao, arXiv 2312.00752; state-spaces/mamba
 * `mamba_ssm/modules/mamba_simple.py`, `models/mixer_seq_simple.py`): pre-RMSNorm residual
 * blocks of in-projection, causal depthwise conv1d, SiLU, selective scan gated by silu(z), and
 * out-projection; final RMSNorm and an LM head tied to the embedding.
 *
 * Differences from the reference, each for a reason:
 * - in_proj and x_proj are split into one Linear per output (x / z; dt / B / C): the kernels take
 *   contiguous (B, T, ·) tensors, and separate matmuls cost the same FLOPs as one wide one.
 * - A is −softplus(−A_raw) (= logσ(A_raw)) instead of −exp(A_log): also always negative, with
 *   gradient ≤ 1, and it reuses the logσ kernel. A_raw starts where A = −(n+1), Mamba's S4D-real init.
 * - dt's initial values are spread deterministically over [1e-3, 1e-1] (log-uniform in
 *   Mamba, drawn at random) so the init draws no random numbers beyond the matrices'.
 */
import type { Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { add, logSigmoid, rmsNorm, silu } from '../autograd/ops.ts';
import { conv1d, selectiveScan } from '../autograd/mixer_ops.ts';
import type { Tape } from '../autograd/tape.ts';
import { type ParamSpec, ParamStore, type Placement, placeSpecs } from '../nn/params.ts';
import { Random } from '../util/random.ts';
import { checkPositive, SpecList, zeroPositions } from './common.ts';
import { type ForwardOptions, type ForwardResult, type Piece, PieceModel, realVocabOf } from './model.ts';
import type { ModelContext, ModelInput } from './context.ts';

/** Shape of a Mamba model (mamba_ssm MambaConfig). */
export interface MambaConfig {
  vocabSize: number;
  /** The tokenizer's V when vocabSize is padded (--pad-vocab; models/model.ts ModelShape). */
  realVocab?: number;
  blockSize: number;
  nLayer: number;
  /** Width C (d_model). */
  nEmbd: number;
  /** SSM state size N per channel (d_state, 16). */
  dState: number;
  /** Inner width D = expand·C (2). */
  expand: number;
  /** Causal conv kernel K (d_conv, 4). */
  dConv: number;
}

/** dt_rank = ⌈C/16⌉ as mamba_simple.py's "auto". */
export function dtRank(c: number): number {
  return Math.ceil(c / 16);
}

const softplusInverse = (y: number) => y + Math.log(-Math.expm1(-y));

/** The parameters of Mamba block `p` (mamba_ssm names, in/x projections split). */
export function mambaBlockSpecs(s: SpecList, p: string, cfg: MambaConfig, projStd: number): void {
  const { nEmbd: C, dState: N, dConv: K } = cfg;
  const D = cfg.expand * C;
  const R = dtRank(C);
  const std = 0.02;
  s.constant(`${p}.norm.weight`, [C], 1);
  s.matrix(`${p}.mixer.in_proj_x.weight`, [D, C], std);
  s.matrix(`${p}.mixer.in_proj_z.weight`, [D, C], std);
  // PyTorch's Conv1d default: U(±1/√K), whose standard deviation is 1/√(3K).
  s.matrix(`${p}.mixer.conv1d.weight`, [D, K], 1 / Math.sqrt(3 * K));
  s.constant(`${p}.mixer.conv1d.bias`, [D], 0);
  s.matrix(`${p}.mixer.x_proj_dt.weight`, [R, D], std);
  s.matrix(`${p}.mixer.x_proj_B.weight`, [N, D], std);
  s.matrix(`${p}.mixer.x_proj_C.weight`, [N, D], std);
  s.matrix(`${p}.mixer.dt_proj.weight`, [D, R], 1 / Math.sqrt(3 * R)); // dt_init "random": U(±R^-½)
  const dtMin = 1e-3, dtMax = 1e-1;
  s.values(
    `${p}.mixer.dt_proj.bias`,
    [D],
    (d) => softplusInverse(dtMin * Math.pow(dtMax / dtMin, D > 1 ? d / (D - 1) : 0.5)),
  );
  s.values(`${p}.mixer.A_raw`, [D, N], (i) => -softplusInverse(1 + (i % N))); // logσ(A_raw) = −(n+1)
  s.constant(`${p}.mixer.D`, [D], 1);
  s.matrix(`${p}.mixer.out_proj.weight`, [C, D], projStd);
}

/**
 * One pre-norm Mamba block: x + out_proj(scan(silu(conv(in_x(RMSNorm x))), …) · silu(z)).
 * Over a tensor-parallel context the inner channels D split as Mamba-2 splits them: in_proj
 * column-parallel, conv / scan / A / D / dt bias per channel, x_proj row-parallel (its small
 * (B·T, R + 2N) output summed), dt_proj column-parallel, out_proj row-parallel.
 * @param x (B·T, C) residual stream. @returns the new residual stream (B·T, C).
 */
export async function mambaBlock(
  ctx: ModelContext,
  tape: Tape,
  x: Tensor,
  p: (name: string) => Tensor,
  n: string,
  cfg: MambaConfig,
  b: number,
  t: number,
): Promise<Tensor> {
  const { dState: N, dConv: K } = cfg;
  const m = `${n}.mixer`;
  const lin = (x: Tensor, name: string) =>
    ctx.linear(tape, x, `${m}.${name}`, p(`${m}.${name}.weight`), null, `${m}.${name}`);
  const a = rmsNorm(tape, x, p(`${n}.norm.weight`), `${n}.norm`); // (B·T, C)
  const xi = await lin(a, 'in_proj_x'); // (B·T, D), D = this rank's inner channels
  const z = await lin(a, 'in_proj_z'); // (B·T, D)
  const D = xi.shape[xi.shape.length - 1];
  // Decoding carries the conv window and the scan state between passes
  // (docs/design.md#decoding-state-of-the-recurrent-layers); else null.
  const window = K > 1 ? ctx.carry?.(`${m}.conv1d`, [b, K - 1, D]) ?? null : null; // (B, K−1, D)
  const ssm = ctx.carry?.(`${m}.scan`, [b, D, N]) ?? null; // (B, D, N)
  const cdims = { b, t, d: D, k: K };
  const conv = conv1d(tape, xi, p(`${m}.conv1d.weight`), p(`${m}.conv1d.bias`), cdims, `${m}.conv1d`, window); // (B, T, D)
  const u = silu(tape, conv, `${m}.conv_act`); // (B, T, D)
  const delta = await lin(await lin(u, 'x_proj_dt'), 'dt_proj'); // (B·T, R) → (B·T, D); its bias is added inside the scan
  const Bm = await lin(u, 'x_proj_B'); // (B·T, N)
  const Cm = await lin(u, 'x_proj_C'); // (B·T, N)
  const A = logSigmoid(tape, p(`${m}.A_raw`), 1, `${m}.A`); // (D, N), < 0
  const dims = { b, t, d: D, n: N };
  // The scan is the mixer core, handed its activations explicitly: the context may re-run it in
  // backward instead of keeping its chunk-entry states (selective recomputation,
  // docs/design.md#activation-recomputation).
  const y = await ctx.mixer(
    tape,
    [u, delta, A, Bm, Cm, z],
    (tp, [u, delta, A, Bm, Cm, z]) =>
      selectiveScan(tp, u, delta, A, Bm, Cm, p(`${m}.D`), p(`${m}.dt_proj.bias`), z, dims, `${m}.scan`, ssm),
    `${m}.scan`,
  ); // (B, T, D)
  return add(tape, x, await lin(y, 'out_proj'), `${n}.res`);
}

/**
 * The parameters of a Mamba LM in declaration order: the embedding; for each block i its
 * {@link mambaBlockSpecs}, then `perLayer(s, i)`'s (mamba-moe's MoE sub-layer); norm_f; then
 * `extra`'s (the hybrid's shared block).
 */
export function mambaParamSpecs(
  cfg: MambaConfig,
  extra?: (s: SpecList) => void,
  perLayer?: (s: SpecList, i: number) => void,
): SpecList {
  const s = new SpecList(), L = cfg.nLayer;
  s.embedding('backbone.embedding.weight', [cfg.vocabSize, cfg.nEmbd], 0.02, realVocabOf(cfg));
  for (let i = 0; i < L; i++) {
    mambaBlockSpecs(s, `backbone.layers.${i}`, cfg, 0.02 / Math.sqrt(2 * L));
    perLayer?.(s, i);
  }
  s.constant('backbone.norm_f.weight', [cfg.nEmbd], 1);
  extra?.(s);
  return s;
}

/** The piece of a Mamba-backbone model that uses parameter `name`. */
export function mambaPieceOf(name: string): Piece {
  const block = /^backbone\.layers\.(\d+)\./.exec(name);
  if (block) return Number(block[1]);
  if (name === 'backbone.embedding.weight') return 'tied';
  if (name.startsWith('backbone.norm_f.')) return 'head';
  return 'shared';
}

/** Checks a Mamba config. @throws Error naming the field that is not a positive integer. */
export function validateMambaConfig(cfg: MambaConfig): MambaConfig {
  checkPositive('mamba model', cfg, ['vocabSize', 'blockSize', 'nLayer', 'nEmbd', 'dState', 'expand', 'dConv']);
  return cfg;
}

export class Mamba extends PieceModel {
  readonly arch: string = 'mamba';
  readonly params: ParamStore;
  readonly nLayer: number;
  protected readonly noPositions: Tensor;
  protected readonly p: (name: string) => Tensor;

  /**
   * With `place`, only this rank's shards of the parameters it holds (nn/params.ts placeSpecs).
   * `extraSpecs` appends parameters after Mamba's (the hybrid's shared block); `specs` replaces
   * the whole list, for a subclass that interleaves its own per layer (mamba-moe).
   */
  constructor(
    readonly gpu: Gpu,
    readonly cfg: MambaConfig,
    seed: number,
    extraSpecs?: (s: SpecList) => void,
    place?: Placement,
    specs?: ParamSpec[],
  ) {
    super();
    validateMambaConfig(cfg);
    this.nLayer = cfg.nLayer;
    const all = specs ?? mambaParamSpecs(cfg, extraSpecs).specs;
    const rng = new Random(seed), random = () => rng.normal();
    this.params = new ParamStore(gpu, place ? placeSpecs(all, random, place) : all, random);
    this.p = (name) => this.params.get(name).value;
    this.noPositions = zeroPositions(gpu, cfg.blockSize, cfg.nEmbd);
  }

  /** x (B, T, C) = wte[tokens] (+ NEFTune noise in training passes); no positional table. */
  async embed(
    ctx: ModelContext,
    tape: Tape,
    input: ModelInput,
    b: number,
    t: number,
    opts: ForwardOptions,
  ): Promise<Tensor> {
    const tables = { wte: this.p('backbone.embedding.weight'), positions: this.noPositions, learned: false };
    return await this.embedTokens(ctx, tape, input, tables, b, t, opts); // (B, T, C)
  }

  /** Mamba layer i, then {@link afterLayer} (the hybrid's shared block, mamba-moe's MoE sub-layer). */
  async block(ctx: ModelContext, tape: Tape, x: Tensor, i: number, b: number, t: number): Promise<Tensor> {
    x = await mambaBlock(ctx, tape, x, this.p, `backbone.layers.${i}`, this.cfg, b, t);
    return await this.afterLayer(ctx, tape, x, i, b, t);
  }

  /** RMSNorm and the LM head tied to the embedding. */
  head(ctx: ModelContext, tape: Tape, x: Tensor, input: ModelInput, opts: ForwardOptions): Promise<ForwardResult> {
    const xf = rmsNorm(tape, x, this.p('backbone.norm_f.weight'), 'norm_f'); // (B·T, C)
    return Promise.resolve(ctx.head(tape, xf, this.p('backbone.embedding.weight'), input, opts, realVocabOf(this.cfg)));
  }

  pieceOf(name: string): Piece {
    return mambaPieceOf(name);
  }

  /** Hook for subclasses (hybrid, mamba-moe): runs after Mamba layer `i` on its output x (B·T, C). */
  protected afterLayer(
    _ctx: ModelContext,
    _tape: Tape,
    x: Tensor,
    _i: number,
    _b: number,
    _t: number,
  ): Promise<Tensor> {
    return Promise.resolve(x);
  }

  numParams(): number {
    return this.params.count;
  }

  /** 6N plus the scan: about 9·D·N FLOPs per token and layer forward (Mamba §3.3), ×3 with backward. */
  flopsPerToken(_t: number): number {
    const { nLayer: L, nEmbd: C, dState: N, expand } = this.cfg;
    return 6 * this.numParams() + 27 * L * expand * C * N;
  }

  describe(): string {
    const { nLayer, nEmbd, dState, expand, dConv, blockSize } = this.cfg;
    return `mamba · ${nLayer} layers · width ${nEmbd} (inner ${
      expand * nEmbd
    }) · state ${dState} · conv ${dConv} · block ${blockSize}`;
  }
}
