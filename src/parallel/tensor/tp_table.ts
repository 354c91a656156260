/**
 * Tensor parallelism as one table keyed by parameter name (picotron's apply_tensor_parallel,
 * Megatron-LM's column / row layers; docs/design.md#one-model-many-contexts): the role of every parameter of every
 * architecture that can be split, the shard each rank keeps, and the inverse that gathers the
 * shards back. src/parallel/mesh/rank_context.ts turns a role into communication; this file is pure
 * array arithmetic, no GPU.
 *
 * Roles:
 * - `column` / `column-qkv`: weight rows (outputs) split; the input comes from the residual
 *   stream through Megatron's f (identity forward, allReduce of the gradient), or the sequence-
 *   parallel all-gather. `column-qkv` splits each of the q, k, v blocks by heads.
 * - `row`: weight columns (inputs) split; the partial outputs summed into the residual stream by
 *   g (allReduce, or the sequence-parallel reduce-scatter); its bias replicated, added once.
 * - `row-inner`: columns split; the partial outputs summed by g into a replicated tensor that
 *   ops split by channel consume, so f follows (their input gradients are partial sums): one
 *   allReduce forward, one backward. Mamba's x_proj → (dt, B, C).
 * - `column-inner`: rows split, the input a `row-inner` output whose backward already sums the
 *   gradient: no communication. Mamba's dt_proj.
 * - `channel`: per-inner-channel tensors (Mamba's conv, A, D, dt bias) split by rows, no
 *   communication: Mamba-2's split of the inner channels; linear's per-head tensors (decay
 *   bias, bonus u, ln_x gain) split with their heads.
 * - `vocab`: the embedding's rows over the vocabulary padded to a multiple of tp.
 * - `replicated`: a full copy on every rank (norms, row-parallel biases, positions, linear's
 *   token-shift mixes and channel-mix receptance: a replicated weight's layer is the plain one).
 */
import { registeredSplits, type SplitRole } from '../../models/arch_hooks.ts';

/** How a parameter takes part in tensor parallelism (see the module doc; a model declares it: models/arch_hooks.ts). */
export type TpRole = SplitRole;

/** How a parameter is split: not at all, by vocabulary rows, by head rows of q/k/v, by rows, by columns. */
export type ShardKind = 'replicated' | 'vocab' | 'qkv' | 'rows' | 'cols';

/**
 * THE table: parameter-name pattern → role, for gpt, mamba, hybrid (whose shared block is a
 * GPT block with RMSNorm) and linear (heads across ranks; its ln_x is a per-head norm, so it
 * splits with them), and the MoE models (theirs plus their experts'). The first match wins.
 */
export const TP_TABLE: readonly (readonly [RegExp, TpRole])[] = [
  // MoE sub-layers (gpt-moe's mlp, mamba-moe's moe): router and experts whole on every tp rank,
  // which routes the same tokens and runs the same experts (split over ep instead).
  [/\.(mlp|moe)\.(router\.weight|experts\.\d+\.c_(fc|proj)\.(weight|bias))$/, 'replicated'],
  [/^backbone\.layers\.\d+\.moe_norm\.weight$/, 'replicated'],
  // gpt (nanoGPT names) and the hybrid's shared block
  [/^transformer\.wte\.weight$/, 'vocab'],
  [/\.attn\.c_attn\.(weight|bias)$/, 'column-qkv'],
  [/\.mlp\.c_fc\.(weight|bias)$/, 'column'],
  [/\.c_proj\.weight$/, 'row'],
  [/\.c_proj\.bias$/, 'replicated'],
  [/\.ln_(1|2|f)\.(weight|bias)$/, 'replicated'],
  [/^transformer\.wpe\.weight$/, 'replicated'],
  [/^shared\.norm_(1|2)\.weight$/, 'replicated'],
  // recurrent depth: the adapter maps the residual-side state and embedding (C → C) into the core's
  // input, whole on every rank like the norms beside it; its core blocks are GPT blocks (rows above).
  [/\.adapter\.(state|embed)\.weight$/, 'replicated'],
  // mamba (state-spaces names, in / x projections split)
  [/^backbone\.embedding\.weight$/, 'vocab'],
  [/\.mixer\.in_proj_(x|z)\.weight$/, 'column'],
  [/\.mixer\.conv1d\.(weight|bias)$/, 'channel'],
  [/\.mixer\.x_proj_(dt|B|C)\.weight$/, 'row-inner'],
  [/\.mixer\.dt_proj\.weight$/, 'column-inner'],
  [/\.mixer\.(dt_proj\.bias|A_raw|D)$/, 'channel'],
  [/\.mixer\.out_proj\.weight$/, 'row'],
  [/^backbone\.(layers\.\d+\.norm|norm_f)\.weight$/, 'replicated'],
  // linear (RWKV-LM names): heads across ranks. The decay's rows are heads ('head') or channels
  // ('channel'), either way in head order, so a row split keeps each rank's heads whole.
  [/^emb\.weight$/, 'vocab'],
  [/^blocks\.\d+\.att\.(receptance|key|value|gate|time_decay)\.weight$/, 'column'],
  [/^blocks\.\d+\.att\.(time_decay\.bias|time_faaaa|ln_x\.weight)$/, 'channel'],
  [/^blocks\.\d+\.att\.output\.weight$/, 'row'],
  [/^blocks\.\d+\.ffn\.key\.weight$/, 'column'],
  [/^blocks\.\d+\.ffn\.value\.weight$/, 'row'],
  // The channel mix's gate: a whole C×C weight per rank beside the split MLP (rank_context.ts: no f).
  [/^blocks\.\d+\.(ffn\.receptance\.weight|(att|ffn)\.time_maa_[rkvwg])$/, 'replicated'],
  [/^(blocks\.\d+\.ln(1|2)|ln_out)\.weight$/, 'replicated'],
];

/**
 * The tensor-parallel role of parameter `name`.
 * @throws Error naming the parameter when the table has no entry for it.
 */
export function tpRole(name: string): TpRole {
  for (const [pattern, role] of TP_TABLE) if (pattern.test(name)) return role;
  // A registered architecture's own split declaration (models/arch_hooks.ts), after the built-in rows.
  for (const split of registeredSplits()) for (const [pattern, role] of split) if (pattern.test(name)) return role;
  throw new Error(
    `tensor parallel: no role for parameter '${name}' in src/parallel/tensor/tp_table.ts or a registered architecture's split declaration`,
  );
}

/**
 * Whether tp rank `tpRank` of `tp` counts its copy of parameter `name` in a sum over the tp group
 * (the global ‖g‖²): a split parameter on every rank (each holds a different part), a replicated
 * one on tp index 0 only (every rank holds the same values).
 */
export function countedOnTpRank(name: string, tp: number, tpRank: number): boolean {
  return tpRank === 0 || tp === 1 || shardKind(name) !== 'replicated';
}

/** The split of parameter `name`: its role's layout. */
export function shardKind(name: string): ShardKind {
  const role = tpRole(name);
  if (role === 'replicated' || role === 'vocab') return role;
  if (role === 'column-qkv') return 'qkv';
  return role === 'row' || role === 'row-inner' ? 'cols' : 'rows';
}

/** Element ranges [from, to) of the full row-major tensor `shape` that form rank r's shard, in shard order. */
function shardRanges(kind: ShardKind, shape: readonly number[], tp: number, r: number): [number, number][] {
  const rows = shape[0], width = shape.length > 1 ? shape[1] : 1;
  const block = (first: number, n: number): [number, number] => [first * width, (first + n) * width];
  if (kind === 'replicated') return [[0, rows * width]];
  if (kind === 'rows') return [block(r * rows / tp, rows / tp)];
  if (kind === 'qkv') return [0, 1, 2].map((k) => block(k * rows / 3 + r * rows / 3 / tp, rows / 3 / tp));
  if (kind === 'cols') {
    return [...Array(rows).keys()].map((i) => [i * width + r * width / tp, i * width + (r + 1) * width / tp]);
  }
  const n = Math.ceil(rows / tp); // vocab: rows past V are padding, clipped here and zero in the shard
  return [block(Math.min(rows, r * n), Math.max(0, Math.min(n, rows - r * n)))];
}

/**
 * The shard shape of a gpt.ts parameter of full shape `shape` (vocab: V is padded to a multiple of tp).
 * @throws Error when a split dimension is not divisible by tp.
 */
export function shardShape(kind: ShardKind, shape: readonly number[], tp: number): number[] {
  const [a, b] = shape;
  const div = (x: number, what: string) => {
    if (x % tp) throw new Error(`tensor parallel: ${what} ${x} is not divisible by tp ${tp}`);
    return x / tp;
  };
  if (kind === 'replicated') return [...shape];
  if (kind === 'vocab') return [Math.ceil(a / tp), b];
  if (kind === 'cols') return [a, div(b, 'in_features')];
  const rows = kind === 'qkv' ? 3 * div(a / 3, 'width C') : div(a, 'out_features');
  return shape.length > 1 ? [rows, b] : [rows];
}

/** Rank r's shard of a full parameter (vocab: padded rows are zero). */
export function shardParam(
  kind: ShardKind,
  full: Float32Array,
  shape: readonly number[],
  tp: number,
  r: number,
): Float32Array {
  const out = new Float32Array(shardShape(kind, shape, tp).reduce((x, y) => x * y, 1));
  let off = 0;
  for (const [from, to] of shardRanges(kind, shape, tp, r)) {
    out.set(full.subarray(from, to), off);
    off += to - from;
  }
  return out;
}

/** The full parameter from every rank's shard (inverse of {@link shardParam}; vocab padding dropped). */
export function unshardParam(kind: ShardKind, shards: Float32Array[], shape: readonly number[]): Float32Array {
  const out = new Float32Array(shape.reduce((x, y) => x * y, 1));
  if (kind === 'replicated') {
    out.set(shards[0]);
    return out;
  }
  shards.forEach((s, r) => {
    let off = 0;
    for (const [from, to] of shardRanges(kind, shape, shards.length, r)) {
      out.set(s.subarray(off, off + to - from), from);
      off += to - from;
    }
  });
  return out;
}
