/**
 * Matmul: C (M,N) = alpha·op(A)·op(B) + beta·C (+ bias) with transpose flags, so backward
 * passes need no materialised transposes (dX = dY·Wᵀ, dW = Xᵀ·dY; docs/design.md §10), and an
 * optional bias epilogue so a linear layer's forward is one pass over its output.
 *
 * The shipped kernel (shaders/matmul.wgsl `main`) is register-blocked: every invocation keeps
 * a 64×16 block of C in registers and streams aligned vec4 loads of op(A) and op(B) straight
 * from storage, with no workgroup-memory stage (the shader's header says why, with the
 * measurements on lavapipe). Operands whose stored rows are not a multiple of 4 long are first
 * zero-padded (`pad_cols`); long inner dimensions on small outputs are split over grid z into
 * pool-allocated partials that `reduce_splits` sums into C (no float atomics), which also
 * serves ragged N. One pipeline per layout (NN, NT, TN, TT) plus the two 1D passes.
 * That kernel serves CPU adapters (`gpu.isCpu`); GPUs get shaders/matmul_tiled.wgsl, the
 * classic shared-memory tiling with a 4×4 register block per invocation (see {@link matmulTuning}).
 * `matmulPlain` is the textbook 16×16 shared-memory tile kernel, kept as the benchmark baseline.
 */
import { cdiv, f32bits, type Gpu } from '../gpu/context.ts';
import { Tensor } from '../gpu/tensor.ts';
import { grid1d } from './grid.ts';
import { specialise } from './shaders.ts';
import { addBiasInPlace } from './elementwise.ts';

/** Transpose flags, scales and bias epilogue of {@link matmul}. */
export interface MatmulOptions {
  /** A is stored (K,M) and used transposed. */
  transA?: boolean;
  /** B is stored (N,K) and used transposed. */
  transB?: boolean;
  /** Scale of op(A)·op(B) (default 1). */
  alpha?: number;
  /** Scale of the previous C (default 0: its old values are ignored, so it may hold garbage, NaNs included). */
  beta?: number;
  /**
   * Bias (N) added to every row of C as it is written: C = alpha·op(A)·op(B) + beta·C + bias,
   * unscaled by alpha (cuBLASLt's BIAS epilogue; llm.c's matmul_forward with bias).
   */
  bias?: Tensor | null;
}

/** Rows and columns of C one invocation of the shipped kernel owns (fixed by the WGSL). */
const TM = 64;
const TN = 16;
/**
 * Invocations per workgroup. lavapipe runs a workgroup on one CPU thread as SIMD lanes of 8
 * (AVX2); 8 keeps every lane busy down to N = 128 and lets the lanes share rows of A.
 */
const LANES = 8;
/** Split K when the grid has fewer workgroups than this (and K is long enough). */
const SPLIT_BELOW_WORKGROUPS = 8;
/** Target workgroup count when splitting K. */
const SPLIT_TARGET_WORKGROUPS = 16;
/** Each split covers at least this much of K, so its partial store stays a small cost. */
const MIN_K_PER_SPLIT = 256;
/** Workgroup size of the 1D passes (reduce_splits, pad_cols), WG_1D in the WGSL. */
const WG_1D = 64;

/**
 * Which kernel serves {@link matmul}: the register-tiled one without workgroup memory on CPU
 * adapters (`gpu.isCpu`), the shared-memory tiled one (shaders/matmul_tiled.wgsl) on GPUs.
 * Tests set `forceTiled` to check the GPU path on a CPU adapter. `fuseBias = false` brings
 * back the old two-pass bias (the product, then `addBiasInPlace` over C), for the training
 * bench's fused-vs-unfused comparison and for tests.
 */
export const matmulTuning = { forceTiled: false, fuseBias: true };

const specialised = new Map<string, string>();

function shaderFor(gpu: Gpu, key: string, consts: Record<string, string>): string {
  let code = specialised.get(key);
  if (code === undefined) {
    code = specialise(gpu.shaders.matmul, consts);
    specialised.set(key, code);
  }
  return code;
}

function checkTensor(what: string, t: Tensor, rows: number, cols: number, stored: string): void {
  if (t.dtype !== 'f32') throw new Error(`${what} must be f32, got ${t.dtype}`);
  if (t.size !== rows * cols) {
    throw new Error(
      `${what} is [${t.shape}] (${t.size} elements) but must hold ${stored} = ${rows}×${cols} = ${rows * cols}`,
    );
  }
}

function checkDims(fn: string, m: number, n: number, k: number): void {
  for (const [name, v] of [['m', m], ['n', n], ['k', k]] as const) {
    if (!Number.isInteger(v) || v < 0) throw new Error(`${fn}: ${name} must be a non-negative integer, got ${v}`);
  }
}

type Range = { buffer: GPUBuffer; offset: number; size: number };

/** The bytes a tensor occupies. */
function exactRange(t: Tensor): Range {
  return { buffer: t.buffer, offset: t.offset, size: t.bytes };
}

/** The tensor's range with its size rounded up to 16 bytes (the shader reads vec4 arrays). */
function vecRange(t: Tensor): Range {
  return { buffer: t.buffer, offset: t.offset, size: Math.max(16, Math.ceil(t.bytes / 16) * 16) };
}

function overlaps(x: Range, y: Range): boolean {
  return x.buffer === y.buffer && x.offset < y.offset + y.size && y.offset < x.offset + x.size;
}

/**
 * A pool tensor of `t.size` elements rounded up to 4, holding a copy of `t` (when `fill`).
 * Used when the 16-byte-rounded range of a slice would run past the end of its buffer.
 */
function staged(gpu: Gpu, t: Tensor, fill: boolean): { tmp: Tensor; exact: Tensor } {
  const tmp = gpu.empty([Math.max(4, Math.ceil(t.size / 4) * 4)], 'f32', 'matmul.staging');
  const exact = new Tensor(gpu, tmp.buffer, [t.size], 'f32', 0, false, 'matmul.staging');
  if (fill && t.size > 0) gpu.copy(t, exact);
  return { tmp, exact };
}

/** Tensors and copies one call creates; released after encoding (GPU order keeps them valid). */
class Scratch {
  private tensors: Tensor[] = [];
  constructor(private readonly gpu: Gpu) {}

  empty(n: number, label: string): Tensor {
    const t = this.gpu.empty([n], 'f32', label);
    this.tensors.push(t);
    return t;
  }

  /** A vec4 binding of `t` (size rounded up to 16 B), through a staging copy if it would not fit. */
  vecBinding(t: Tensor): Range {
    const r = vecRange(t);
    if (r.offset + r.size <= t.buffer.size) return r;
    const s = staged(this.gpu, t, true);
    this.tensors.push(s.tmp);
    return vecRange(s.tmp);
  }

  /** Takes ownership of a pool tensor created elsewhere. */
  adopt(t: Tensor): void {
    this.tensors.push(t);
  }

  releaseAll(): void {
    for (const t of this.tensors) t.release();
    this.tensors = [];
  }
}

/**
 * A matrix stored `rows`×`cols` as a vec4 binding with row length `ld` a multiple of 4: the
 * tensor itself when cols % 4 == 0, else a zero-padded copy made by `pad_cols`.
 */
function alignedRows(gpu: Gpu, scratch: Scratch, t: Tensor, rows: number, cols: number): { bind: Range; ld: number } {
  if (cols % 4 === 0) return { bind: scratch.vecBinding(t), ld: cols };
  const ld = Math.ceil(cols / 4) * 4;
  const padded = scratch.empty(rows * ld, 'matmul.padded');
  gpu.dispatch(
    { key: 'matmul.pad_cols', code: gpu.shaders.matmul, entryPoint: 'pad_cols' },
    [scratch.vecBinding(t), undefined, padded, undefined],
    params({ m: rows, n: cols, ldc: ld }),
    grid1d(rows * (ld / 4), WG_1D),
  );
  return { bind: vecRange(padded), ld };
}

/**
 * C (M,N) = alpha·op(A)·op(B) + beta·C; op(A) is (M,K): A stored (M,K), or (K,M) when transA;
 * op(B) is (K,N): B stored (K,N), or (N,K) when transB. All row-major f32; any tensor may be
 * a slice at a byte offset. With beta = 1 the product accumulates into C (gradient
 * accumulation: dW += Xᵀ·dY); with beta = 0 (default) C's old values are ignored.
 *
 * Every layout (NN, NT, TN, TT) and any M, N, K (ragged sizes included) are supported. The
 * fast path is N % 4 == 0 and the stored row lengths of A and B multiples of 4: one dispatch.
 * Otherwise operands are zero-padded to such rows (`pad_cols`) and/or the kernel writes
 * partial sums that a reduce pass folds into C with alpha and beta. When the grid would be
 * small and K long (e.g. dW of 128×128 over K = 8192), K is split over grid z into partials
 * (split-K), reduced the same way. A bias (N) is added by whichever pass writes C, so exactly
 * once whatever the split.
 *
 * @throws Error when a dimension is not a non-negative integer, a tensor's size does not
 *   match its stored shape, a tensor is not f32, or C overlaps A, B or the bias.
 */
export function matmul(
  gpu: Gpu,
  a: Tensor,
  b: Tensor,
  c: Tensor,
  m: number,
  n: number,
  k: number,
  opts: MatmulOptions = {},
): void {
  const transA = opts.transA ?? false;
  const transB = opts.transB ?? false;
  const alpha = opts.alpha ?? 1;
  const beta = opts.beta ?? 0;
  checkDims('matmul', m, n, k);
  const [aRows, aCols] = transA ? [k, m] : [m, k];
  const [bRows, bCols] = transB ? [n, k] : [k, n];
  checkTensor('matmul: A', a, aRows, aCols, transA ? '(K,M)' : '(M,K)');
  checkTensor('matmul: B', b, bRows, bCols, transB ? '(N,K)' : '(K,N)');
  checkTensor('matmul: C', c, m, n, '(M,N)');
  const bias = opts.bias ?? null;
  if (bias && (bias.dtype !== 'f32' || bias.size !== n)) {
    throw new Error(
      `matmul: the bias must be f32 of N = ${n} elements (one per column of C), got ${bias.dtype} [${bias.shape}]`,
    );
  }
  if (m === 0 || n === 0) return;
  if (k === 0 && beta === 0 && !bias) {
    gpu.clear(c); // an empty sum
    return;
  }
  for (const [what, t] of [['A', a], ['B', b], ['the bias', bias]] as const) {
    if (t && overlaps(exactRange(c), exactRange(t))) {
      throw new Error(`matmul: C overlaps ${what} (in-place matmul is not supported)`);
    }
  }
  if (bias && !matmulTuning.fuseBias) {
    matmul(gpu, a, b, c, m, n, k, { ...opts, bias: null });
    addBiasInPlace(gpu, c, bias);
    return;
  }

  if (!gpu.isCpu || matmulTuning.forceTiled) {
    matmulTiled(gpu, a, b, c, m, n, k, transA, transB, alpha, beta, aCols, bCols, bias);
    return;
  }

  const scratch = new Scratch(gpu);
  const A = alignedRows(gpu, scratch, a, aRows, aCols);
  const B = alignedRows(gpu, scratch, b, bRows, bCols);

  // Lanes along N while N fills them (they then share rows of A), the rest along M.
  const colInv = cdiv(n, TN);
  const wgX = Math.min(LANES, 2 ** Math.ceil(Math.log2(colInv)));
  const wgY = LANES / wgX;
  const grid = [cdiv(colInv, wgX), cdiv(cdiv(m, TM), wgY)];

  let splits = 1;
  let kSplit = Math.ceil(k / 4) * 4;
  const groups = grid[0] * grid[1];
  if (groups < SPLIT_BELOW_WORKGROUPS && k >= 2 * MIN_K_PER_SPLIT) {
    const want = Math.min(cdiv(SPLIT_TARGET_WORKGROUPS, groups), Math.floor(k / MIN_K_PER_SPLIT));
    kSplit = Math.ceil(cdiv(k, want) / 4) * 4;
    splits = cdiv(k, kSplit);
  }

  // One pipeline per layout: the lane split (wgX) is a uniform, since every pipeline costs
  // seconds of LLVM time on lavapipe.
  const direct = splits === 1 && n % 4 === 0;
  const key = `matmul.${transA ? 'T' : 'N'}${transB ? 'T' : 'N'}`;
  const code = shaderFor(gpu, key, { TRANS_A: String(transA), TRANS_B: String(transB) });
  const shape = { m, n, k, kSplit, lda: A.ld, ldb: B.ld, wgX };
  // Without a bias, binding 3 gets an operand already bound read-only (has_bias = 0: unread).
  const biasBind = bias ? scratch.vecBinding(bias) : A.bind;
  const hasBias = bias ? 1 : 0;

  if (direct) {
    // The kernel stores alpha·AB (+ beta·C + bias) as whole vec4 rows straight into C (its
    // size is a multiple of 16 bytes since N % 4 == 0).
    gpu.dispatch(
      { key, code },
      [A.bind, B.bind, exactRange(c), biasBind],
      params({ ...shape, alpha, beta, ldc: n, mnPad: m * n, hasBias }),
      grid,
    );
  } else {
    // Partials: rows padded to ldc = N rounded up to 4, split z at element z·mnPad, raw sums.
    // Released right after encoding: the pool may hand the buffer out again at once, but GPU
    // work runs in encoding order, so later users write it only after the reduce read it.
    const ldc = Math.ceil(n / 4) * 4;
    const mnPad = m * ldc;
    const partial = scratch.empty(splits * mnPad, 'matmul.partials');
    // The partials get raw sums only; the bias is added once, by the reduce.
    gpu.dispatch({ key, code }, [A.bind, B.bind, partial, A.bind], params({ ...shape, alpha: 1, ldc, mnPad }), [
      ...grid,
      splits,
    ]);
    // The reduce writes C through a vec4 view rounded up to 16 B; a slice at the very end of
    // its buffer goes through a staging copy instead.
    let cBind = vecRange(c);
    let cBack: Tensor | null = null;
    if (cBind.offset + cBind.size > c.buffer.size) {
      const s = staged(gpu, c, beta !== 0);
      scratch.adopt(s.tmp);
      cBind = vecRange(s.tmp);
      cBack = s.exact;
    }
    gpu.dispatch(
      { key: 'matmul.reduce_splits', code: gpu.shaders.matmul, entryPoint: 'reduce_splits' },
      [partial, undefined, cBind, bias ? biasBind : partial],
      params({ ...shape, alpha, beta, splits, ldc, mnPad, hasBias }),
      grid1d(m * (ldc / 4), WG_1D),
    );
    if (cBack) gpu.copy(cBack, c);
  }
  scratch.releaseAll();
}

/** The GPU path: shaders/matmul_tiled.wgsl, 64×64 blocks of C per 16×16 workgroup. */
function matmulTiled(
  gpu: Gpu,
  a: Tensor,
  b: Tensor,
  c: Tensor,
  m: number,
  n: number,
  k: number,
  transA: boolean,
  transB: boolean,
  alpha: number,
  beta: number,
  lda: number,
  ldb: number,
  bias: Tensor | null,
): void {
  const key = `matmul_tiled.${transA ? 'T' : 'N'}${transB ? 'T' : 'N'}`;
  let code = specialised.get(key);
  if (code === undefined) {
    code = specialise(gpu.shaders.matmul_tiled, { TRANS_A: String(transA), TRANS_B: String(transB) });
    specialised.set(key, code);
  }
  gpu.dispatch(
    { key, code },
    [a, b, c, bias ?? a],
    new Uint32Array([m, n, k, lda, ldb, f32bits(alpha), f32bits(beta), bias ? 1 : 0]),
    [cdiv(n, 64), cdiv(m, 64)],
  );
}

/** Fields of the shader's Params struct; unset ones are 0 (alpha 1). */
interface ParamFields {
  m: number;
  n: number;
  k?: number;
  kSplit?: number;
  alpha?: number;
  beta?: number;
  splits?: number;
  ldc?: number;
  mnPad?: number;
  lda?: number;
  ldb?: number;
  wgX?: number;
  hasBias?: number;
}

/** The shader's Params struct (13 words, in declaration order). */
function params(f: ParamFields): Uint32Array {
  return new Uint32Array([
    f.m,
    f.n,
    f.k ?? 0,
    f.kSplit ?? 0,
    f32bits(f.alpha ?? 1),
    f32bits(f.beta ?? 0),
    f.splits ?? 1,
    f.ldc ?? 0,
    f.mnPad ?? 0,
    f.lda ?? 0,
    f.ldb ?? 0,
    f.wgX ?? 1,
    f.hasBias ?? 0,
  ]);
}

/**
 * The plain 16×16 shared-memory tiled kernel (NN only, beta 0), the baseline of the bench:
 * C (M,N) = A (M,K) · B (K,N). Follows the classic shared-memory tiling of the CUDA C
 * programming guide; one invocation per element of C.
 * @throws Error when a dimension or a tensor size does not match.
 */
export function matmulPlain(gpu: Gpu, a: Tensor, b: Tensor, c: Tensor, m: number, n: number, k: number): void {
  checkDims('matmulPlain', m, n, k);
  checkTensor('matmulPlain: A', a, m, k, '(M,K)');
  checkTensor('matmulPlain: B', b, k, n, '(K,N)');
  checkTensor('matmulPlain: C', c, m, n, '(M,N)');
  if (m === 0 || n === 0) return;
  gpu.dispatch(
    { key: 'matmul_plain', code: gpu.shaders.matmul_plain },
    [a, b, c],
    new Uint32Array([m, n, k, 0]),
    [cdiv(n, 16), cdiv(m, 16)],
  );
}
