/**
 * Matmul: C (M,N) = alpha·op(A)·op(B) + beta·C (+ bias) with transpose flags, so backward
 * passes need no materialised transposes (dX = dY·Wᵀ, dW = Xᵀ·dY; docs/design.md#matmul), and an
 * optional bias epilogue so a linear layer's forward is one pass over its output.
 *
 * CPU adapters (`gpu.isCpu`) run the register-blocked kernel of matmul_cpu.ts (shaders/matmul.wgsl);
 * GPUs get shaders/matmul_tiled.wgsl, the classic shared-memory tiling with a 4×4 register block
 * per invocation, or for outputs that fill the GPU with 128×128 blocks shaders/matmul_tiled_128.wgsl
 * with an 8×8 one (see {@link matmulTuning}). Where the device has `subgroups`, both read op(A)
 * through subgroup shuffles instead of workgroup memory (shaders/matmul_tiled_sg.wgsl,
 * matmul_tiled_128_sg.wgsl; {@link subgroupMatmul}). `matmulPlain` is the textbook 16×16
 * shared-memory tile kernel, kept as the benchmark baseline.
 */
import { cdiv, f32bits, type Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { specialise } from './shaders.ts';
import { addBiasInPlace } from './elementwise.ts';
import { matmulRegisterBlocked } from './matmul_cpu.ts';
import { requireF16 } from './cast.ts';

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

/**
 * Which kernel serves {@link matmul}: the register-tiled one without workgroup memory on CPU
 * adapters (`gpu.isCpu`), the shared-memory tiled ones on GPUs. Tests set `forceTiled` to check
 * the GPU path on a CPU adapter and `forceRegister` to check the CPU path (its split-K and
 * padding) on a GPU. `tile` picks the GPU kernel's block: 64 (matmul_tiled.wgsl), 128
 * (matmul_tiled_128.wgsl) or 0, the default, for 128 once the output holds at least
 * {@link LARGE_TILE_BLOCKS} 128×128 blocks. `subgroups = false` keeps the GPU kernels'
 * workgroup-memory variants on a device that has subgroups ({@link subgroupMatmul}), so tests
 * can run both. `fuseBias = false` brings back the old two-pass bias (the product, then
 * `addBiasInPlace` over C), for the training bench's fused-vs-unfused comparison and for tests.
 */
export const matmulTuning = {
  forceTiled: false,
  forceRegister: false,
  tile: 0 as 0 | 64 | 128,
  subgroups: true,
  fuseBias: true,
};

/**
 * Whether the GPU path's tiled kernels use their subgroup variants on `gpu` for operands of these
 * dtypes: the context uses them (`Gpu.subgroups`: asked for and offered) and {@link matmulTuning}
 * does not force the fallback. f16
 * operands keep the workgroup-memory kernels: no adapter the tests reach offers both
 * `shader-f16` and `subgroups` (lavapipe lacks the one, SwiftShader the other), so that
 * combination could never be checked, and it is not shipped unchecked.
 */
export function subgroupMatmul(gpu: Gpu, aDtype = 'f32', bDtype = 'f32'): boolean {
  return matmulTuning.subgroups && gpu.subgroups && aDtype === 'f32' && bDtype === 'f32';
}

/**
 * Output blocks of 128×128 from which the large tile wins: about one per multiprocessor of a
 * big GPU (an H200 has 132). Measured on one (docs/gpu-results.md): at 1024² (64 blocks) the 64²
 * tile was faster, from 2048² (256 blocks) the 128² one, 1.5–10× depending on the runtime.
 */
export const LARGE_TILE_BLOCKS = 128;

function checkTensor(what: string, t: Tensor, rows: number, cols: number, stored: string, f16 = false): void {
  if (t.dtype !== 'f32' && !(f16 && t.dtype === 'f16')) {
    throw new Error(`${what} must be f32${f16 ? ' or f16' : ''}, got ${t.dtype}`);
  }
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

/**
 * A {@link matmul} call past its checks (sizes, dtypes, no overlap with C, M and N non-zero),
 * with the stored shapes of A and B, as each kernel path receives it.
 */
export interface CheckedMatmul {
  a: Tensor;
  b: Tensor;
  c: Tensor;
  m: number;
  n: number;
  k: number;
  transA: boolean;
  transB: boolean;
  alpha: number;
  beta: number;
  bias: Tensor | null;
  aRows: number;
  aCols: number;
  bRows: number;
  bCols: number;
}

/** Whether two tensors share bytes of one buffer. */
function overlaps(x: Tensor, y: Tensor): boolean {
  return x.buffer === y.buffer && x.offset < y.offset + y.bytes && y.offset < x.offset + x.bytes;
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
  checkTensor('matmul: A', a, aRows, aCols, transA ? '(K,M)' : '(M,K)', true);
  checkTensor('matmul: B', b, bRows, bCols, transB ? '(N,K)' : '(K,N)', true);
  checkTensor('matmul: C', c, m, n, '(M,N)');
  const half = a.dtype === 'f16' || b.dtype === 'f16';
  if (half) requireF16(gpu, 'matmul');
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
    if (t && overlaps(c, t)) {
      throw new Error(`matmul: C overlaps ${what} (in-place matmul is not supported)`);
    }
  }
  if (bias && !matmulTuning.fuseBias) {
    matmul(gpu, a, b, c, m, n, k, { ...opts, bias: null });
    addBiasInPlace(gpu, c, bias);
    return;
  }

  // f16 operands only have the tiled kernels (their loads convert); CPU adapters run them too.
  const gpuPath = half || (!matmulTuning.forceRegister && (!gpu.isCpu || matmulTuning.forceTiled));
  // WebGPU refuses one buffer bound read-only and writable in the same dispatch, even at
  // disjoint ranges; the tiled kernels bind A, B and the bias straight beside C, so an operand
  // that lives in C's buffer is read from a copy.
  const copies: Tensor[] = [];
  const apart = (t: Tensor): Tensor => {
    if (!gpuPath || t.buffer !== c.buffer) return t;
    const copy = gpu.empty(t.shape, t.dtype, `${t.label}.copy`);
    gpu.copy(t, copy);
    copies.push(copy);
    return copy;
  };
  const [a2, b2, bias2] = [apart(a), apart(b), bias && apart(bias)];
  const call = { a: a2, b: b2, c, m, n, k, transA, transB, alpha, beta, bias: bias2, aRows, aCols, bRows, bCols };
  if (gpuPath) matmulTiled(gpu, call);
  else matmulRegisterBlocked(gpu, call);
  for (const t of copies) t.release();
}

/** Workgroup memory of matmul_tiled_128.wgsl: two tiles of 16 k-rows × 33 vec4s (bytes). */
export const LARGE_TILE_WORKGROUP_BYTES = 2 * 16 * 33 * 16;

/**
 * The GPU kernel's block for an (M, N) output: 128 once there are {@link LARGE_TILE_BLOCKS}
 * blocks of it and the device's workgroup memory holds its tiles (16.5 KiB, over WebGPU's
 * 16 KiB default), else 64.
 */
export function matmulTile(gpu: Gpu, m: number, n: number): 64 | 128 {
  const fits = gpu.device.limits.maxComputeWorkgroupStorageSize >= LARGE_TILE_WORKGROUP_BYTES;
  return fits && cdiv(m, 128) * cdiv(n, 128) >= LARGE_TILE_BLOCKS ? 128 : 64;
}

/**
 * A tiled matmul's WGSL with operand a and / or b declared array<f16> (its loads convert to f32).
 * @throws Error when a declaration is not found, so a renamed binding cannot be missed.
 */
function halfOperands(code: string, a: boolean, b: boolean): string {
  let out = 'enable f16;\n' + code;
  for (const [name, on] of [['a', a], ['b', b]] as const) {
    if (!on) continue;
    const decl = `var<storage, read> ${name}: array<f32>;`;
    if (!out.includes(decl)) throw new Error(`matmul: the tiled kernel has no '${decl}' to make f16`);
    out = out.replace(decl, `var<storage, read> ${name}: array<f16>;`);
  }
  return out;
}

/** The tiled kernels specialised per layout (TRANS_A, TRANS_B), dtypes and variant, built once each. */
const specialised = new Map<string, string>();

/**
 * The GPU path: 64×64 or 128×128 blocks of C per workgroup of 256 ({@link matmulTuning}), with
 * the subgroup variant where {@link subgroupMatmul} allows. The variant is fixed here, at
 * pipeline creation (key suffix '.sg'), so a kernel never branches on it.
 */
function matmulTiled(gpu: Gpu, call: CheckedMatmul): void {
  const { a, b, c, m, n, k, transA, transB, alpha, beta, bias, aCols: lda, bCols: ldb } = call;
  const tile = matmulTuning.tile || matmulTile(gpu, m, n);
  const base = tile === 128 ? 'matmul_tiled_128' : 'matmul_tiled';
  const sg = subgroupMatmul(gpu, a.dtype, b.dtype);
  const shader = sg ? (`${base}_sg` as const) : base;
  const types = a.dtype === 'f16' || b.dtype === 'f16' ? `.${a.dtype}${b.dtype}` : '';
  const key = `${base}.${transA ? 'T' : 'N'}${transB ? 'T' : 'N'}${types}${sg ? '.sg' : ''}`;
  let code = specialised.get(key);
  if (code === undefined) {
    code = specialise(gpu.shaders[shader], { TRANS_A: String(transA), TRANS_B: String(transB) });
    if (types) code = halfOperands(code, a.dtype === 'f16', b.dtype === 'f16');
    specialised.set(key, code);
  }
  gpu.dispatch(
    { key, code },
    [a, b, c, bias ?? a],
    new Uint32Array([m, n, k, lda, ldb, f32bits(alpha), f32bits(beta), bias ? 1 : 0]),
    [cdiv(n, tile), cdiv(m, tile)],
  );
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
