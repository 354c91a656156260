/**
 * What the recurrent architectures' code allocates on the tape for one micro-batch, item by item,
 * for the analytical activation memory (activation_memory.ts; docs/design.md#memory-per-rank), in the style
 * of activation_items.ts's GPT lists: the Mamba block (src/models/mamba.ts mambaBlock), the
 * RWKV-style block (src/models/linear.ts, both decay kinds), the hybrid's shared attention block
 * (src/models/hybrid.ts), and their embedding (no positional table) and RMSNorm head, on one
 * rank (LOCAL) and over a tensor-parallel RankContext (src/parallel/mesh/rank_context.ts). Each list
 * mirrors the ops in their order; tests/parallel/activation_memory.test.ts checks them exactly.
 */
import { paddedVocab } from '../parallel/plan/plan.ts';
import { type ActivationItem, attentionItems, type Geo, gptLayer, it, tpLayer } from './activation_items.ts';
import { scanStateShape } from '../kernels/selective_scan.ts';
import { linearAttentionStateShape } from '../kernels/linear_attention.ts';

/** A recurrent model's shape beside {@link Geo}: Mamba's inner width D, dt rank R, state N; linear's decay. */
export interface RecGeo extends Geo {
  D: number;
  R: number;
  Ns: number;
  decay: 'head' | 'channel';
}

const prod = (shape: number[]) => shape.reduce((a, b) => a * b, 1);
/** Rows of the residual stream on this rank: N/t under sequence parallelism. */
const rowsOf = (g: Geo, tp: boolean) => (tp && g.sp ? (g.b * g.s) / g.t : g.b * g.s);

/** The selective scan's saved tensors on d channels: its output and the chunk-entry states. */
export function scanItems(g: RecGeo, d: number): ActivationItem[] {
  const N = g.b * g.s;
  return [
    it('selective scan output', N * d),
    it('scan chunk-entry states', prod(scanStateShape({ b: g.b, t: g.s, d, n: g.Ns }))),
  ];
}

/**
 * One mambaBlock: RMSNorm, in_proj x / z, conv1d, SiLU, x_proj dt → dt_proj, x_proj B / C,
 * A = logσ(A_raw), the scan, out_proj, the residual. Over tp > 1: in_proj column-parallel (its
 * own f copy or all-gather each), x_proj row-inner (partial, allReduce, f copy), out_proj row.
 */
export function mambaLayer(g: RecGeo, tp: boolean): ActivationItem[] {
  const N = g.b * g.s, C = g.C, t = tp ? g.t : 1, d = g.D / t, Nl = rowsOf(g, tp);
  const inner = (what: string, w: number, k: number) =>
    t > 1 ? it(`${what} (partial, allReduce, f copy)`, N * w, 3 * k) : it(what, N * w, k);
  const out = [it('norm output', Nl * C), it('RMSNorm rstd', Nl)];
  if (t > 1) out.push(it(g.sp ? 'sequence-parallel all-gather outputs' : 'f (copy to tp region) outputs', N * C, 2));
  out.push(
    it('in_proj x, z outputs', N * d, 2),
    it('conv1d output, SiLU output', N * d, 2),
    inner('x_proj dt output', g.R, 1),
    it('dt_proj output', N * d),
    inner('x_proj B, C outputs', g.Ns, 2),
    it('A = logσ(A_raw)', d * g.Ns),
    ...scanItems(g, d),
  );
  if (t > 1) {
    out.push(it('out_proj partial sum', N * C), it(g.sp ? 'reduce-scatter output' : 'allReduce output', Nl * C));
  } else out.push(it('out_proj output', N * C));
  return [...out, it('residual sum', Nl * C)];
}

/** The linear attention core on h heads: log-decays (nd values a row), output, and the head kernel's chunk states. */
export function linearCoreItems(g: RecGeo, h: number, nd: number): ActivationItem[] {
  const N = g.b * g.s, hs = g.C / g.nh;
  const out = [it('log-decays logσ(w)/16', N * nd), it('linear attention output', N * h * hs)];
  if (g.decay === 'head') {
    const dims = { b: g.b, t: g.s, h, dk: hs, dv: hs, scale: 1 };
    out.push(it('linear attention chunk states', prod(linearAttentionStateShape(dims))));
  }
  return out;
}

/**
 * One RWKV-style block (linear.ts block): time mixing (RMSNorm, token shift, five lerps, r / k /
 * v / gate / decay projections, the core, per-head ln_x and its gain, SiLU gate, output) and
 * channel mixing (RMSNorm, token shift, two lerps, relu² MLP, sigmoid receptance). Over tp > 1
 * (no sp): column-parallel projections each take their own f copy; output and ffn.value are
 * row-parallel; the receptance is replicated.
 */
export function linearLayer(g: RecGeo, tp: boolean): ActivationItem[] {
  const N = g.b * g.s, C = g.C, t = tp ? g.t : 1, c = C / t, h = g.nh / t, nd = (g.decay === 'head' ? g.nh : C) / t;
  const out = [
    it('ln1, ln2 outputs', N * C, 2),
    it('RMSNorm rstd', N, 2),
    it('token shifts', N * C, 2),
    it('time-mix lerps r, k, v, w, g', N * C, 5),
  ];
  if (t > 1) out.push(it('f (copy to tp region) outputs', N * C, 6)); // r, k, v, decay, gate, ffn.key
  out.push(
    it('receptance, key, value outputs', N * c, 3),
    it('decay logits', N * nd),
    ...linearCoreItems(g, h, nd),
    it('ln_x output, its gain', N * c, 2),
    it('ln_x rstd (per head)', N * h),
    it('gate output, SiLU output, gated', N * c, 3),
  );
  out.push(it(t > 1 ? 'row-parallel partial sums' : 'output, ffn.value outputs', N * C, 2));
  if (t > 1) out.push(it('allReduce outputs', N * C, 2));
  return [
    ...out,
    it('residual sums', N * C, 2),
    it('channel-mix lerps k, r', N * C, 2),
    it('ffn.key output, relu²', (4 * N * C) / t, 2),
    it('receptance, sigmoid, gated', N * C, 3),
  ];
}

/** The hybrid's shared block: gpt.ts's block with RMSNorm, no biases, FlashAttention (hybrid.ts passes no `naive`). */
export function sharedBlock(g: Geo, tp: boolean): ActivationItem[] {
  const h = { ...g, bias: false, naive: false };
  return tp ? tpLayer(h, true) : gptLayer(h, true);
}

/** The shared block's attention core on this rank (what selective recomputation drops). */
export const sharedCore = (g: Geo, tp: boolean): ActivationItem[] =>
  tp ? attentionItems(g, g.C / g.t, g.nh / g.t, false) : attentionItems(g, g.C, g.nh, false);

/**
 * The embedding without a positional table (a frozen zero one): LOCAL.embed is gpt.ts's lookup;
 * over tp > 1 the vocab-parallel lookup of the token part only (vocab_parallel.ts).
 */
export function recurrentEmbed(g: Geo, tp: boolean): ActivationItem[] {
  const N = g.b * g.s, C = g.C;
  if (!tp || g.t === 1) {
    return [it('token embedding', N * C), it('token index offsets', g.V + 1), it('token index positions', N)];
  }
  return [
    it('vocab shard ids', N),
    it('zero position table', g.s * C),
    it('vocab mask', N * C),
    it('token embedding (shard)', N * C),
    it('token index offsets', paddedVocab(g.V, g.t) / g.t + 1),
    it('token index positions', N),
    it('masked partial embedding', N * C),
    it(g.sp ? 'embedding reduce-scatter' : 'embedding allReduce', rowsOf(g, tp) * C),
  ];
}
