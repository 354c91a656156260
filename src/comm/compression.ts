/**
 * Compression schemes and the per-dimension policy of compression-assisted collectives
 * (docs/design.md#compressed-collectives-and-the-per-dimension-policy; MCR-DL, arXiv 2303.08374, and its hybrid
 * per-dimension study): what `--compress dp=powersgd:4,tp=fp16,pp=int8` or `--compress naive:int8` means, checked here
 * once for the plan schema, the trainer and the demo, and the exact 4-byte words a scheme puts on the wire for n
 * values. Runtime-neutral: no GPU code (the kernels are src/kernels/compress/).
 */
import { QUANT_BLOCKS } from '../kernels/compress/blocks.ts';

/** The schemes, as spelled on the command line. */
export const SCHEME_KINDS = ['none', 'fp16', 'bf16', 'int8', 'int4', 'topk', 'sign', 'powersgd'] as const;
export type SchemeKind = typeof SCHEME_KINDS[number];

/** One compression scheme: `int8` and `int4` carry their block size, `topk` its density, `powersgd` its rank. */
export type Scheme =
  | { kind: 'none' | 'fp16' | 'bf16' | 'sign' }
  | { kind: 'int8' | 'int4'; block: number }
  | { kind: 'topk'; density: number }
  | { kind: 'powersgd'; rank: number };

/** The parallel dimensions a policy names (as the plan's degrees). */
export const COMPRESS_DIMS = ['dp', 'tp', 'pp', 'cp', 'ep'] as const;
export type CompressDim = typeof COMPRESS_DIMS[number];

/** A scheme per dimension; an unnamed dimension is uncompressed. */
export type CompressPolicy = Record<CompressDim, Scheme>;

/** int8 and int4 block sizes the kernels take (kernels/compress/blocks.ts, one list for both). */
export const QUANT_BLOCK_SIZES = QUANT_BLOCKS;

const NONE: Scheme = { kind: 'none' };

/** The policy that compresses nothing: every run without --compress. */
export const NO_COMPRESSION: Readonly<CompressPolicy> = Object.freeze({
  dp: NONE,
  tp: NONE,
  pp: NONE,
  cp: NONE,
  ep: NONE,
});
const ALLOWED = 'none, fp16, bf16, int8[:block], int4[:block], topk[:density], sign, powersgd[:rank]';

/**
 * Parses one scheme: `none`, `fp16`, `bf16`, `int8[:B]` and `int4[:B]` (B in
 * {@link QUANT_BLOCK_SIZES}, default 256), `topk[:d]` (density d in (0, 1], default 0.01), `sign`, `powersgd[:r]` (rank r ≥ 1,
 * default 4).
 * @throws Error naming the text and what is allowed.
 */
export function parseScheme(text: string): Scheme {
  const [kind, arg, extra] = text.trim().split(':');
  const bad = (why: string) => new Error(`compression scheme '${text}': ${why} (allowed: ${ALLOWED})`);
  if (extra !== undefined) throw bad("at most one ':' parameter");
  const num = (def: number) => (arg === undefined ? def : Number(arg));
  switch (kind) {
    case 'none':
    case 'fp16':
    case 'bf16':
    case 'sign':
      if (arg !== undefined) throw bad(`${kind} takes no parameter`);
      return { kind };
    case 'int8':
    case 'int4': {
      const block = num(256);
      if (!(QUANT_BLOCK_SIZES as readonly number[]).includes(block)) {
        throw bad(`the ${kind} block must be one of ${QUANT_BLOCK_SIZES.join(', ')}`);
      }
      return { kind, block };
    }
    case 'topk': {
      const density = num(0.01);
      if (!(density > 0 && density <= 1)) throw bad('the top-k density must be in (0, 1]');
      return { kind, density };
    }
    case 'powersgd': {
      const rank = num(4);
      if (!Number.isInteger(rank) || rank < 1 || rank > 64) throw bad('the PowerSGD rank must be an integer in 1–64');
      return { kind, rank };
    }
    default:
      throw bad(`unknown scheme '${kind}'`);
  }
}

/** The scheme as {@link parseScheme} reads it back (`int8:256`, `int4:256`, `topk:0.01`, `powersgd:4`). */
export function formatScheme(s: Scheme): string {
  if (s.kind === 'int8' || s.kind === 'int4') return `${s.kind}:${s.block}`;
  if (s.kind === 'topk') return `topk:${s.density}`;
  if (s.kind === 'powersgd') return `powersgd:${s.rank}`;
  return s.kind;
}

/**
 * Parses a policy: `dim=scheme,…` over {@link COMPRESS_DIMS} (unnamed dimensions: none), `none`,
 * or `naive:<scheme>` for one scheme on every dimension. PowerSGD compresses gradient matrices,
 * so it is allowed on dp only; naive:powersgd is refused.
 * @throws Error naming the entry at fault and what is allowed.
 */
export function parseCompressPolicy(text: string): CompressPolicy {
  const policy = Object.fromEntries(COMPRESS_DIMS.map((d) => [d, NONE])) as CompressPolicy;
  const t = text.trim();
  if (t === '' || t === 'none') return policy;
  if (t.startsWith('naive:')) {
    const s = parseScheme(t.slice('naive:'.length));
    if (s.kind === 'powersgd') {
      throw new Error(
        `--compress ${t}: PowerSGD compresses dp gradient matrices only; give it as dp=${formatScheme(s)}`,
      );
    }
    for (const d of COMPRESS_DIMS) policy[d] = s;
    return policy;
  }
  const seen = new Set<string>();
  for (const entry of t.split(',')) {
    const [dim, scheme, extra] = entry.split('=');
    if (scheme === undefined || extra !== undefined) {
      throw new Error(
        `--compress: '${entry}' is not dim=scheme (dims: ${COMPRESS_DIMS.join(', ')}; or naive:<scheme>)`,
      );
    }
    const d = dim.trim() as CompressDim;
    if (!COMPRESS_DIMS.includes(d)) {
      throw new Error(`--compress: unknown dimension '${dim}' (allowed: ${COMPRESS_DIMS.join(', ')})`);
    }
    if (seen.has(d)) throw new Error(`--compress: dimension ${d} is given twice`);
    seen.add(d);
    const s = parseScheme(scheme);
    if (s.kind === 'powersgd' && d !== 'dp') {
      throw new Error(`--compress ${d}=${scheme}: PowerSGD compresses dp gradient matrices only`);
    }
    policy[d] = s;
  }
  return policy;
}

/** The policy as `dp=…,tp=…` (dimensions without compression left out; `none` when all are). */
export function formatCompressPolicy(p: CompressPolicy): string {
  const on = COMPRESS_DIMS.filter((d) => p[d].kind !== 'none').map((d) => `${d}=${formatScheme(p[d])}`);
  return on.length ? on.join(',') : 'none';
}

/** Whether any dimension compresses. */
export function compresses(p: CompressPolicy | undefined): boolean {
  return !!p && COMPRESS_DIMS.some((d) => p[d].kind !== 'none');
}

/**
 * Whether the scheme keeps an error-feedback residual on a gradient sum that recurs every step
 * (top-k and sign drop most of a message; PowerSGD keeps its own). Casts, int8 and int4 (whose
 * rounding to nearest errs by at most half a step either way) are unbiased enough without one, and activations never recur, so only dp's gradients carry residuals.
 */
export function needsErrorFeedback(s: Scheme): boolean {
  return s.kind === 'topk' || s.kind === 'sign';
}

/** k of a top-k message of n values at `density` (at least 1), as kernels/compress/topk.ts counts it. */
export function topKOf(n: number, density: number): number {
  return Math.max(1, Math.ceil(density * n));
}

/**
 * 4-byte words of one compressed message of n values (payload + scales + indices, each part in
 * whole words), as the compressors store them: fp16 and bf16 ⌈n/2⌉, int8:B ⌈n/4⌉ + ⌈n/B⌉,
 * int4:B ⌈n/8⌉ + ⌈n/B⌉, sign
 * ⌈n/32⌉ + 1, topk 2k, none n.
 * @throws Error for powersgd, whose message depends on the matrix shape ({@link powerSgdWords}).
 */
export function schemeWords(s: Scheme, n: number): number {
  switch (s.kind) {
    case 'none':
      return n;
    case 'fp16':
    case 'bf16':
      return Math.ceil(n / 2);
    case 'int8':
      return Math.ceil(n / 4) + Math.ceil(n / s.block);
    case 'int4':
      return Math.ceil(n / 8) + Math.ceil(n / s.block);
    case 'sign':
      return Math.ceil(n / 32) + 1;
    case 'topk':
      return 2 * topKOf(n, s.density);
    case 'powersgd':
      throw new Error('schemeWords: a PowerSGD message depends on the matrix shape; use powerSgdWords');
  }
}

/** One matrix of a PowerSGD-compressed gradient: its elements at `offset` of the packed vector. */
export interface GradMatrix {
  name: string;
  offset: number;
  rows: number;
  cols: number;
}

/**
 * Whether a (rows × cols) gradient is worth PowerSGD rank r: P and Q must be at most half its
 * size (PyTorch's PowerSGD hook compresses a matrix only past a compression rate of 2); the
 * rest (vectors, small matrices) is allReduced uncompressed.
 */
export function powerSgdCompresses(rows: number, cols: number, rank: number): boolean {
  return rank <= Math.min(rows, cols) && 2 * rank * (rows + cols) <= rows * cols;
}

/**
 * Words each of PowerSGD's two allReduces carries for `matrices` at rank r: P (Σ rows·r) and
 * Q (Σ cols·r); `rest` elements ride uncompressed with Q's allReduce.
 */
export function powerSgdWords(matrices: readonly GradMatrix[], rank: number, rest: number): { p: number; q: number } {
  const p = matrices.reduce((s, m) => s + m.rows * rank, 0);
  const q = matrices.reduce((s, m) => s + m.cols * rank, 0);
  return { p, q: q + rest };
}
