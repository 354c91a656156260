/**
 * Activation recomputation for layered models (docs/design.md#activation-recomputation; Korthikanti et al., arXiv
 * 2205.05198): `full` runs each block as one recomputed segment (src/autograd/checkpoint.ts)
 * — the tape keeps only the block's input and output, and the backward runs the block again;
 * `selective` recomputes only the sequence-mixing cores, whose saved tensors are the large,
 * cheap ones: the attention core (the T×T probabilities of `--attention naive`; FlashAttention
 * keeps only O and the log-sum-exp, so there it saves just the log-sum-exp) and the recurrent
 * cores (Mamba's chunk-entry scan states; the linear attention's chunk states and its
 * log-decays). Both give the same gradients as no recomputation.
 */
import type { Tensor } from '../gpu/tensor.ts';
import type { Tape } from '../autograd/tape.ts';
import { checkpoint } from '../autograd/checkpoint.ts';
import { RULES } from '../autograd/rules.ts';
import type { ModelContext } from './context.ts';
import type { MoEContext } from './moe_layer.ts';
import type { LayeredModel } from './model.ts';

/** `--recompute`: what a block keeps for its backward. */
export type Recompute = 'none' | 'selective' | 'full';

/** `ctx` with its attention and mixer cores recomputed in backward (selective), or `ctx` itself. */
export function recomputeContext(ctx: ModelContext, mode: Recompute): ModelContext {
  if (mode !== 'selective') return ctx;
  return {
    linear: (tape, x, name, w, b, label) => ctx.linear(tape, x, name, w, b, label),
    attention: (tape, qkv, dims, label, naive) =>
      checkpoint(
        tape,
        [qkv],
        async (t, [q]) => await ctx.attention(t, q, dims, label, naive),
        `${label}.core`,
        () => RULES,
      ),
    mixer: (tape, inputs, core, label) =>
      checkpoint(tape, inputs, async (t, xs) => await ctx.mixer(t, xs, core, label), `${label}.core`, () => RULES),
    embed: (tape, input, wte, positions, learned, b, t) => ctx.embed(tape, input, wte, positions, learned, b, t),
    head: (tape, xf, wte, input, opts, vocab) => ctx.head(tape, xf, wte, input, opts, vocab),
    local: (width) => ctx.local(width),
    ...(ctx.shift && { shift: ctx.shift.bind(ctx) }),
    // A MoE model's context carries its MoE function (moe_layer.ts MoEContext): keep it.
    ...((ctx as Partial<MoEContext>).moe ? { moe: (ctx as MoEContext).moe } : {}),
  };
}

/**
 * Block i of `m` on the residual stream x under `mode`: recomputed whole (full), or as is.
 * @returns the new residual stream.
 */
export function runBlock(
  m: LayeredModel,
  ctx: ModelContext,
  tape: Tape,
  x: Tensor,
  i: number,
  b: number,
  t: number,
  mode: Recompute,
): Promise<Tensor> {
  if (mode !== 'full') return m.block(ctx, tape, x, i, b, t);
  return checkpoint(tape, [x], (sub, [xin]) => m.block(ctx, sub, xin, i, b, t), `block.${i}`, () => RULES);
}
