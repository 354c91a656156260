/**
 * PowerSGD (Vogels et al., arXiv 1905.13727, Algorithm 1 with error feedback, Algorithm 2):
 * rank-r compression of a matrix M (rows × cols) by one step of subspace iteration,
 * warm-started from the previous step's Q:
 *   M = g + e;  P = M·Q;  [allReduce P];  P̂ = orthogonalise(P);  Q = Mᵀ·P̂;  [allReduce Q];
 *   D = P̂·Qᵀ;  e = M − D.
 * The products are kernels/matmul.ts; the orthogonalisation is modified Gram–Schmidt
 * (shaders/powersgd.wgsl). The allReduces belong to the caller, between {@link PowerSgd.stepP},
 * {@link PowerSgd.stepQ} and {@link PowerSgd.decompress}; with one rank there is nothing between.
 */
import type { Gpu } from '../../gpu/context.ts';
import type { Tensor } from '../../gpu/tensor.ts';
import { matmul } from '../matmul.ts';
import { axpy } from '../elementwise.ts';
import { LAVAPIPE_LOOP_CAP } from '../reduce.ts';
import { Random } from '../../util/random.ts';
import { checkTensor } from './compressor.ts';

/** Loop steps one invocation of the orthogonalisation runs for the last column (see the shader). */
function orthSteps(rows: number, rank: number): number {
  return (2 * rank - 1) * (2 * Math.ceil(rows / 256) + 8);
}

/**
 * Makes the columns of p (rows × rank, row-major f32) orthonormal in place by modified
 * Gram–Schmidt with one reorthogonalisation pass (so a rank-deficient P still gives orthonormal
 * columns), one dispatch per column; a column of norm 0 stays 0.
 * @throws Error when p does not hold rows·rank f32, rank is not in [1, rows], or the matrix is
 *   too tall for a CPU adapter's loop cap (about 4 million rows / rank).
 */
export function orthogonalise(gpu: Gpu, p: Tensor, rows: number, rank: number): void {
  if (!Number.isInteger(rows) || rows < 1 || !Number.isInteger(rank) || rank < 1 || rank > rows) {
    throw new Error(`orthogonalise: needs 1 ≤ rank ≤ rows, got rows ${rows}, rank ${rank}`);
  }
  if (orthSteps(rows, rank) >= LAVAPIPE_LOOP_CAP) {
    throw new Error(`orthogonalise: ${rows} rows × rank ${rank} is over what one workgroup loops over`);
  }
  checkTensor('orthogonalise', 'p', p, 'f32', rows * rank);
  for (let col = 0; col < rank; col++) {
    gpu.dispatch(
      { key: 'compress.powersgd.orthogonalise', code: gpu.shaders.powersgd, entryPoint: 'orthogonalise' },
      [p],
      new Uint32Array([rows, rank, col, 0]),
      [1],
    );
  }
}

/** The initial Q (cols × rank): i.i.d. standard normal from `seed`, as the paper's hooks draw it. */
export function powerSgdInitialQ(cols: number, rank: number, seed: number): Float32Array {
  const r = new Random(seed);
  return Float32Array.from({ length: cols * rank }, () => r.normal());
}

/** Options of {@link PowerSgd}. */
export interface PowerSgdOptions {
  /** Seed of the initial Q (default 0). */
  seed?: number;
  /** Keep the residual e = M − D between steps (default true, the paper's Algorithm 2). */
  errorFeedback?: boolean;
}

/**
 * The state of one matrix's PowerSGD compression: P (rows × rank), Q (cols × rank, kept between
 * steps: the warm start) and the residual (rows × cols; it holds M during a step). Per step the
 * wire carries P and Q: {@link wireBytes} = 4·rank·(rows + cols) bytes.
 */
export class PowerSgd {
  readonly p: Tensor;
  readonly q: Tensor;
  readonly residual: Tensor;
  readonly errorFeedback: boolean;

  /** @throws Error unless rows, cols ≥ 1 and 1 ≤ rank ≤ min(rows, cols) are integers. */
  constructor(
    gpu: Gpu,
    readonly rows: number,
    readonly cols: number,
    readonly rank: number,
    opts: PowerSgdOptions = {},
  ) {
    for (const [name, v] of [['rows', rows], ['cols', cols]] as const) {
      if (!Number.isInteger(v) || v < 1) throw new Error(`PowerSgd: ${name} must be a positive integer, got ${v}`);
    }
    if (!Number.isInteger(rank) || rank < 1 || rank > Math.min(rows, cols)) {
      throw new Error(
        `PowerSgd: rank must be an integer in [1, min(rows, cols) = ${Math.min(rows, cols)}], got ${rank}`,
      );
    }
    this.errorFeedback = opts.errorFeedback ?? true;
    this.p = gpu.empty([rows, rank], 'f32', 'powersgd.p');
    this.q = gpu.upload(powerSgdInitialQ(cols, rank, opts.seed ?? 0), [cols, rank], 'f32', 'powersgd.q');
    this.residual = gpu.zeros([rows, cols], 'f32', 'powersgd.residual');
  }

  /** Bytes on the wire per step: P and Q in f32. */
  wireBytes(): number {
    return 4 * this.rank * (this.rows + this.cols);
  }

  /**
   * M = g + e (into the residual), P = M·Q. P is then ready to be all-reduced.
   * @throws Error when g is not f32 of rows·cols elements.
   */
  stepP(gpu: Gpu, g: Tensor): void {
    checkTensor('PowerSgd.stepP', 'g', g, 'f32', this.rows * this.cols);
    axpy(gpu, 1, g, this.residual);
    matmul(gpu, this.residual, this.q, this.p, this.rows, this.rank, this.cols);
  }

  /** P̂ = orthogonalise(P) in place, Q = Mᵀ·P̂. Q is then ready to be all-reduced. */
  stepQ(gpu: Gpu): void {
    orthogonalise(gpu, this.p, this.rows, this.rank);
    matmul(gpu, this.residual, this.p, this.q, this.cols, this.rank, this.rows, { transA: true });
  }

  /**
   * out (rows × cols) = P̂·Qᵀ, the approximation of M; the residual becomes M − out (or 0
   * without error feedback).
   * @throws Error when out is not f32 of rows·cols elements.
   */
  decompress(gpu: Gpu, out: Tensor): void {
    checkTensor('PowerSgd.decompress', 'out', out, 'f32', this.rows * this.cols);
    matmul(gpu, this.p, this.q, out, this.rows, this.cols, this.rank, { transB: true });
    if (this.errorFeedback) axpy(gpu, -1, out, this.residual);
    else gpu.clear(this.residual);
  }

  /** Releases P, Q and the residual. */
  release(): void {
    for (const t of [this.p, this.q, this.residual]) t.release();
  }
}
