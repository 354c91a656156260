/**
 * What the model code allocates on the tape for one micro-batch, item by item (tensor, elements,
 * count), for the analytical activation memory (activation_memory.ts; docs/design.md#memory-per-rank): the
 * GPT block, embedding and head on one rank (src/models/gpt.ts over LOCAL) and over a
 * tensor-parallel RankContext (src/parallel/mesh/rank_context.ts). Each list mirrors the ops in their
 * order, so a change to the model code shows up as a failing exact-bytes test
 * (tests/parallel/activation_memory.test.ts).
 */
import { paddedVocab } from '../parallel/plan/plan.ts';
import { POOL_GRANULE } from '../gpu/pool.ts';

/** `count` allocations of `elements` values each, 4 bytes apiece unless `width` says 2 (f16). */
export interface ActivationItem {
  what: string;
  elements: number;
  count: number;
  width?: 2 | 4;
}

export const it = (what: string, elements: number, count = 1, width: 2 | 4 = 4): ActivationItem => ({
  what,
  elements,
  count,
  ...(width === 4 ? {} : { width }),
});
/**
 * Bytes of `items`; `pooled`: each allocation stored in whole 4-byte words (an odd f16 count
 * carries a padding half, gpu/tensor.ts) and rounded up as src/gpu/pool.ts does.
 */
export const itemBytes = (items: ActivationItem[], pooled = false): number =>
  items.reduce((a, x) => {
    const bytes = (x.width ?? 4) * x.elements, words = Math.ceil(bytes / 4) * 4;
    return a + x.count * (pooled ? Math.max(POOL_GRANULE, Math.ceil(words / POOL_GRANULE) * POOL_GRANULE) : bytes);
  }, 0);

/**
 * The half precision copies a GPT block's tape holds under autocast (autograd/autocast.ts), one
 * rank without tp or cp: each linear's input and weight, and FlashAttention's q, k, v (`flash`);
 * 2 bytes per element for f16, 4 for bf16 (rounded values in f32 storage).
 */
export function autocastLayer(g: Geo, width: 2 | 4, flash: boolean): ActivationItem[] {
  const N = g.b * g.s, C = g.C, w = (what: string, n: number) => it(`autocast: ${what}`, n, 1, width);
  return [
    w('c_attn input', N * C),
    w('c_attn weight', 3 * C * C),
    ...(flash ? [w('flash attention q, k, v', 3 * N * C)] : []),
    w('attn c_proj input', N * C),
    w('attn c_proj weight', C * C),
    w('c_fc input', N * C),
    w('c_fc weight', 4 * C * C),
    w('mlp c_proj input', 4 * N * C),
    w('mlp c_proj weight', 4 * C * C),
  ];
}

/** The LM head's copies under autocast: ln_f's output and the tied token embedding (V, C). */
export function autocastHead(g: Geo, width: 2 | 4): ActivationItem[] {
  return [it('autocast: lm_head input', g.b * g.s * g.C, 1, width), it('autocast: wte', g.V * g.C, 1, width)];
}
/** One rank's view of a micro-batch: b rows of s tokens, width C, nh heads, tp degree t. */
export interface Geo {
  b: number;
  s: number;
  T: number;
  C: number;
  nh: number;
  V: number;
  t: number;
  sp: boolean;
  cp: number;
  cpKind: 'ring' | 'ulysses';
  bias: boolean;
  naive: boolean;
}

/** Attention's saved tensors for width c and heads nh on this rank (N = b·s rows). */
export function attentionItems(g: Geo, c: number, nh: number, naive: boolean): ActivationItem[] {
  const N = g.b * g.s;
  if (g.cp > 1 && g.cpKind === 'ulysses') {
    return [
      it('Ulysses q,k,v all-to-all output', 3 * N * c),
      it('attention output O (heads split)', N * c),
      it('attention log-sum-exp', N * nh),
      it('Ulysses output all-to-all', N * c),
    ];
  }
  if (naive && g.cp === 1) {
    return [it('attention output', N * c), it('attention probabilities (T×T)', g.b * nh * g.s * g.s)];
  }
  return [
    it(g.cp > 1 ? 'ring attention output O' : 'flash attention output O', N * c),
    it('attention log-sum-exp', N * nh),
  ];
}

/** The saved statistics of `norms` norms over n rows: LayerNorm's mean and rstd, or RMSNorm's rstd (the hybrid's shared block, the recurrent heads). */
const normStats = (n: number, norms: number, rms: boolean) =>
  rms ? it('RMSNorm rstd', n, norms) : it('LayerNorm mean, rstd', n, 2 * norms);

/** One block of gpt.ts (also pipeline_stage.ts and context_parallel.ts, which repeat its op order). */
export function gptLayer(g: Geo, rms = false): ActivationItem[] {
  const N = g.b * g.s, C = g.C;
  return [
    it('ln_1, ln_2 outputs', N * C, 2),
    normStats(N, 2, rms),
    it('c_attn output q,k,v', 3 * N * C),
    ...attentionItems(g, C, g.nh, g.naive),
    it('attn c_proj output', N * C),
    it('residual sums', N * C, 2),
    it('c_fc output, GELU output', 4 * N * C, 2),
    it('mlp c_proj output', N * C),
  ];
}

/** One gpt.ts block over a tensor-parallel RankContext (rank_context.ts) on tp rank (Nl = N/t rows under sp). */
export function tpLayer(g: Geo, rms = false): ActivationItem[] {
  const N = g.b * g.s,
    C = g.C,
    t = g.t,
    Nl = g.sp ? N / t : N,
    out: ActivationItem[] = [it('ln_1, ln_2 outputs', Nl * C, 2), normStats(Nl, 2, rms)];
  if (t > 1) out.push(it(g.sp ? 'sequence-parallel all-gather outputs' : 'f (copy to tp region) outputs', N * C, 2));
  out.push(
    it('c_attn output q,k,v (heads / tp)', (3 * N * C) / t),
    ...attentionItems(g, C / t, g.nh / t, false),
    it('row-parallel partial sums', N * C, 2),
  );
  if (t > 1) out.push(it(g.sp ? 'reduce-scatter outputs' : 'allReduce outputs', Nl * C, 2));
  if (g.bias) out.push(it('bias ones column', Nl, 2), it('bias rows', Nl * C, 2), it('biased sums', Nl * C, 2));
  out.push(it('residual sums', Nl * C, 2), it('c_fc output, GELU output (/ tp)', (4 * N * C) / t, 2));
  return out;
}

/** gpt.ts embedding (+ the token index its backward reads); `uploads` adds stage / cp inputs. */
export function gptEmbed(g: Geo): ActivationItem[] {
  const N = g.b * g.s, C = g.C;
  if (g.cp === 1) {
    return [
      it('token + position embedding', N * C),
      it('token index offsets', g.V + 1),
      it('token index positions', N),
    ];
  }
  return [
    it('token, position ids', N, 2),
    it('zero position table', g.s * C),
    it('token embedding', N * C),
    it('token index offsets', g.V + 1),
    it('position embedding (wpe by global position)', N * C),
    it('position index offsets', g.T + 1),
    it('index positions', N, 2),
    it('embedding sum', N * C),
  ];
}

/** RankContext.embed with tp > 1: vocab-parallel lookup, positions by lookup, their sum. */
export function tpEmbed(g: Geo): ActivationItem[] {
  const N = g.b * g.s, C = g.C, Nl = g.sp ? N / g.t : N, Vt = paddedVocab(g.V, g.t) / g.t;
  const out = [
    it('vocab shard ids, position ids', N, 2),
    it('zero position table', g.s * C),
    it('vocab mask', N * C),
    it('token embedding (shard)', N * C),
    it('token index offsets', Vt + 1),
    it('index positions', N, 2),
    it('masked partial embedding', N * C),
    it(g.sp ? 'embedding reduce-scatter' : 'embedding allReduce', Nl * C),
    it('zero token table', g.s * C),
    it('position index offsets', g.T + 1),
    it('position embedding', N * C),
  ];
  if (g.sp) out.push(it('position rows of this rank', Nl * C));
  return [...out, it('embedding sum', Nl * C)];
}

/**
 * ln_f (the recurrent models' RMSNorm norm_f with `rms`), the tied LM head and the loss: LOCAL's
 * (+ targets upload for pipeline stages) or RankContext.head with tp > 1.
 */
export function head(g: Geo, tp: boolean, targets: boolean, rms = false): ActivationItem[] {
  const N = g.b * g.s, C = g.C, Nl = tp && g.sp ? N / g.t : N;
  const out = [it('ln_f output', Nl * C), normStats(Nl, 1, rms)];
  if (tp) {
    if (g.t > 1) out.push(it(g.sp ? 'sequence-parallel all-gather output' : 'f (copy) output', N * C));
    return [...out, it('logits (vocab / tp)', (N * paddedVocab(g.V, g.t)) / g.t), it('loss', 2)];
  }
  return [
    ...out,
    ...(targets ? [it('targets', N)] : []),
    it('logits', N * g.V),
    it('cross-entropy log-sum-exp', N),
    it('loss', 2),
  ];
}

/**
 * The half precision copies autocast adds per layer and at the head (docs/design.md#mixed-precision), counted
 * for gpt on ranks without tp or cp and without recomputation.
 * @throws Error for another architecture or split under autocast, naming what is counted.
 */
export function autocastItems(
  autocast: 'f16' | 'bf16' | null,
  arch: string,
  plan: { tp: number; cp: number },
  recompute: string,
  g: Geo,
): { layer: ActivationItem[]; head: ActivationItem[] } {
  if (!autocast) return { layer: [], head: [] };
  if (arch !== 'gpt' || plan.tp > 1 || plan.cp > 1 || recompute !== 'none') {
    throw new Error(
      `activation memory under --precision ${autocast}-mixed: its half precision copies are counted for --arch gpt without tp, cp or recompute; got --arch ${arch}, tp ${plan.tp}, cp ${plan.cp}, recompute ${recompute}`,
    );
  }
  const width = autocast === 'f16' ? 2 : 4;
  return { layer: autocastLayer(g, width, !g.naive), head: autocastHead(g, width) };
}
