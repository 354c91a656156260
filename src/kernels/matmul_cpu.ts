/**
 * The register-blocked matmul kernel that matmul.ts runs on CPU adapters (shaders/matmul.wgsl
 * `main`): every invocation keeps a 64×16 block of C in registers (32×16 on SwiftShader, {@link rowQuads}) and streams aligned vec4 loads
 * of op(A) and op(B) straight from storage, with no workgroup-memory stage (the shader's header
 * says why, with the measurements on lavapipe). Operands whose stored rows are not a multiple of
 * 4 long are first zero-padded (`pad_cols`); long inner dimensions on small outputs are split
 * over grid z into pool-allocated partials that `reduce_splits` sums into C (no float atomics),
 * which also serves ragged N. One pipeline per layout (NN, NT, TN, TT) plus the two 1D passes.
 *
 * The padding, staging and split-K choices concern this kernel only, so they live here; matmul.ts
 * keeps the argument checks and the choice of kernel that every path shares.
 */
import { cdiv, f32bits, type Gpu } from '../gpu/context.ts';
import { Tensor } from '../gpu/tensor.ts';
import { grid1d } from './grid.ts';
import { specialise } from './shaders.ts';
import type { CheckedMatmul } from './matmul.ts';

/** Columns of C one invocation owns (fixed by the WGSL: four column quads). */
const TN = 16;
/** Row quads of the written-out tile: 16, so an invocation owns 64 rows of C. */
const MAX_ROW_QUADS = 16;

/**
 * Tile rows per driver, in quads of 4 ({@link rowQuads}); tests set `rowQuads` to check every
 * variant on one adapter (0: the driver's default).
 */
export const registerTile = { rowQuads: 0 };

/**
 * Row quads of the register tile on `gpu`. Lavapipe gets the whole 64×16 tile (the shader's header
 * gives its measurements). SwiftShader compiles that tile in 7–10 s per layout on 2 cores
 * (register allocation of 1024 accumulators), 32×16 in 1.4 s and 16×16 in 0.8 s, and every rank of
 * a browser run pays it again: it gets 32 rows (docs/design.md#matmul).
 */
export function rowQuads(gpu: Gpu): number {
  if (registerTile.rowQuads) return registerTile.rowQuads;
  return gpu.softwareDriver === 'swiftshader' ? 8 : MAX_ROW_QUADS;
}

/**
 * shaders/matmul.wgsl with its tile cut to `quads` row quads (1–16): the fields of `Acc` past
 * g{quads-1}, their lines in `k_step` and their cases in `main`'s store loop are dropped and TM set.
 * @throws Error when the shader no longer has the written-out shape this cuts (so a rewrite of the
 *   kernel cannot silently leave a variant uncut).
 */
export function cutTile(code: string, quads: number): string {
  if (!Number.isInteger(quads) || quads < 1 || quads > MAX_ROW_QUADS) {
    throw new Error(`register tile: ${quads} row quads; allowed 1–${MAX_ROW_QUADS}`);
  }
  if (quads === MAX_ROW_QUADS) return code;
  const count = (re: RegExp) => (code.match(re) ?? []).length;
  const step = /^ {2}\(\*acc\)\.g(\d+) = quad_fma\([^\n]*\n/gm;
  const cases = /^ {6}case (\d+)u: \{ q = acc\.g\d+; \}\n/gm;
  const acc = /struct Acc \{[^}]*\}/;
  const last = /default: \{ q = acc\.g15; \}/;
  if (count(step) !== MAX_ROW_QUADS || count(cases) !== MAX_ROW_QUADS - 1 || !acc.test(code) || !last.test(code)) {
    throw new Error('register tile: shaders/matmul.wgsl no longer has the 16 written-out row quads cutTile expects');
  }
  const fields = Array.from({ length: quads }, (_, g) => `g${g}: Quad`).join(', ');
  return specialise(
    code
      .replace(acc, `struct Acc {\n  ${fields},\n}`)
      .replace(step, (line, g) => (Number(g) < quads ? line : ''))
      .replace(cases, (line, g) => (Number(g) < quads - 1 ? line : ''))
      .replace(last, `default: { q = acc.g${quads - 1}; }`),
    { TM: `${quads * 4}u` },
  );
}
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

const specialised = new Map<string, string>();

function shaderFor(gpu: Gpu, key: string, quads: number, consts: Record<string, string>): string {
  let code = specialised.get(key);
  if (code === undefined) {
    code = specialise(cutTile(gpu.shaders.matmul, quads), consts);
    specialised.set(key, code);
  }
  return code;
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

/** C (M,N) = alpha·op(A)·op(B) + beta·C (+ bias) on the register-blocked kernel. */
export function matmulRegisterBlocked(gpu: Gpu, call: CheckedMatmul): void {
  const { a, b, c, m, n, k, transA, transB, alpha, beta, bias, aRows, aCols, bRows, bCols } = call;
  const scratch = new Scratch(gpu);
  const A = alignedRows(gpu, scratch, a, aRows, aCols);
  const B = alignedRows(gpu, scratch, b, bRows, bCols);

  // Lanes along N while N fills them (they then share rows of A), the rest along M.
  const colInv = cdiv(n, TN);
  const wgX = Math.min(LANES, 2 ** Math.ceil(Math.log2(colInv)));
  const wgY = LANES / wgX;
  const quads = rowQuads(gpu);
  const grid = [cdiv(colInv, wgX), cdiv(cdiv(m, 4 * quads), wgY)];

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
  const key = `matmul.${transA ? 'T' : 'N'}${transB ? 'T' : 'N'}${quads === MAX_ROW_QUADS ? '' : `.r${quads}`}`;
  const code = shaderFor(gpu, key, quads, { TRANS_A: String(transA), TRANS_B: String(transB) });
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
