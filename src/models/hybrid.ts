/**
 * A Zamba-style hybrid (Glorioso et al., arXiv 2405.16712): a Mamba backbone with ONE
 * attention block whose weights are shared by every application, inserted after every
 * `attnEvery`-th Mamba layer. Sharing keeps attention's parameter cost to one block while
 * giving the recurrent backbone exact recall over the context at a few depths; the tape sums
 * the gradients of all applications into the one set of weights.
 *
 * Simplification against Zamba: the shared block reads the residual stream alone (Zamba
 * concatenates the original embeddings to it). No positional table anywhere: the Mamba layers
 * before the first attention give it position (as Jamba does).
 */
import type { Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { add, gelu, rmsNorm } from '../autograd/ops.ts';
import type { ModelContext } from './context.ts';
import type { Tape } from '../autograd/tape.ts';
import { Mamba, type MambaConfig } from './mamba.ts';
import type { SpecList } from './common.ts';
import type { Placement } from '../nn/params.ts';

/** Mamba's shape plus the shared block's heads and spacing. */
export interface HybridConfig extends MambaConfig {
  /** Heads of the shared attention block; must divide nEmbd. */
  nHead: number;
  /** The shared block runs after Mamba layers attnEvery−1, 2·attnEvery−1, … */
  attnEvery: number;
}

/** The shared attention + MLP block's parameters, declared after the Mamba backbone's. */
export function hybridSharedSpecs(s: SpecList, cfg: HybridConfig): void {
  const C = cfg.nEmbd, uses = Math.floor(cfg.nLayer / cfg.attnEvery);
  const projStd = 0.02 / Math.sqrt(2 * Math.max(1, uses));
  s.constant('shared.norm_1.weight', [C], 1);
  s.matrix('shared.attn.c_attn.weight', [3 * C, C], 0.02);
  s.matrix('shared.attn.c_proj.weight', [C, C], projStd);
  s.constant('shared.norm_2.weight', [C], 1);
  s.matrix('shared.mlp.c_fc.weight', [4 * C, C], 0.02);
  s.matrix('shared.mlp.c_proj.weight', [C, 4 * C], projStd);
}

export class Hybrid extends Mamba {
  override readonly arch = 'hybrid';

  /** @throws Error when heads do not divide the width or attnEvery is not a positive integer. */
  constructor(gpu: Gpu, override readonly cfg: HybridConfig, seed: number, place?: Placement) {
    if (!Number.isInteger(cfg.nHead) || cfg.nHead < 1 || cfg.nEmbd % cfg.nHead !== 0) {
      throw new Error(`hybrid model: nEmbd (${cfg.nEmbd}) must be divisible by nHead (${cfg.nHead})`);
    }
    if (!Number.isInteger(cfg.attnEvery) || cfg.attnEvery < 1) {
      throw new Error(`hybrid model: attnEvery must be a positive integer, got ${cfg.attnEvery}`);
    }
    super(gpu, cfg, seed, (s) => hybridSharedSpecs(s, cfg), place);
  }

  /** The shared pre-norm attention + MLP block after every attnEvery-th Mamba layer. */
  protected override async afterLayer(
    ctx: ModelContext,
    tape: Tape,
    x: Tensor,
    i: number,
    b: number,
    t: number,
  ): Promise<Tensor> {
    if ((i + 1) % this.cfg.attnEvery !== 0) return x;
    const p = this.p, c = this.cfg.nEmbd, n = `shared@${i}`;
    const lin = (x: Tensor, name: string, label: string) =>
      ctx.linear(tape, x, `shared.${name}`, p(`shared.${name}.weight`), null, `${n}.${label}`);
    const a = rmsNorm(tape, x, p('shared.norm_1.weight'), `${n}.norm_1`); // (B·T, C)
    const qkv = await lin(a, 'attn.c_attn', 'c_attn'); // (B·T, 3C)
    const y = await ctx.attention(tape, qkv, { b, t, c, nh: this.cfg.nHead }, `${n}.attn`); // (B, T, C)
    x = add(tape, x, await lin(y, 'attn.c_proj', 'c_proj'), `${n}.res1`);
    const m = rmsNorm(tape, x, p('shared.norm_2.weight'), `${n}.norm_2`);
    const up = gelu(tape, await lin(m, 'mlp.c_fc', 'c_fc'), `${n}.gelu`); // (B·T, 4C)
    return add(tape, x, await lin(up, 'mlp.c_proj', 'mlp_proj'), `${n}.res2`);
  }

  /**
   * Mamba's count, plus 6 FLOPs per shared weight for every application after the first (6N
   * counts each weight once), plus attention's 12·C·T per token per application.
   */
  override flopsPerToken(t: number): number {
    const C = this.cfg.nEmbd;
    const uses = Math.floor(this.cfg.nLayer / this.cfg.attnEvery);
    return super.flopsPerToken(t) + 6 * Math.max(0, uses - 1) * 12 * C * C + 12 * uses * C * t;
  }

  override describe(): string {
    return `${
      super.describe().replace(/^mamba/, 'hybrid (Zamba-style)')
    } · shared attention (${this.cfg.nHead} heads) every ${this.cfg.attnEvery} layers`;
  }
}
