/**
 * PowerSGD's allReduce of a packed data-parallel gradient (Vogels et al., arXiv 1905.13727,
 * Algorithm 1 with error feedback; docs/design.md#compressed-collectives-and-the-per-dimension-policy): every matrix
 * worth compressing (compression.ts powerSgdCompresses) goes as rank-r factors — P = M·Q all-reduced, P̂ =
 * orthogonalise(P), Q = Mᵀ·P̂ all-reduced, D = P̂·Qᵀ — and the rest of the vector (biases, norms, small matrices) rides
 * uncompressed with Q's allReduce, as PyTorch's PowerSGD hook sends rank-1 tensors whole. Since P and Q are linear in
 * M, the result equals one rank's PowerSGD of the mean gradient; each rank keeps its own residual M − D. Q is
 * warm-started step to step and equal on every rank (same seed, then all-reduced).
 */
import type { Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { PowerSgd } from '../kernels/compress/index.ts';
import type { Communicator } from './communicator.ts';
import { type GradMatrix, powerSgdCompresses } from './compression.ts';

/** A packed gradient's layout: its matrices (offset, rows, cols) in a vector of n elements. */
export interface GradLayout {
  n: number;
  matrices: readonly GradMatrix[];
}

/** The matrices of `layout` PowerSGD rank r compresses; the rest of the vector goes whole. */
export function compressedMatrices(layout: GradLayout, rank: number): GradMatrix[] {
  return layout.matrices.filter((m) => powerSgdCompresses(m.rows, m.cols, rank));
}

/** PowerSGD state of one packed gradient on one rank, and its allReduce. */
export class PowerSgdAllReduce {
  readonly matrices: readonly GradMatrix[];
  private readonly states: PowerSgd[];
  /** [start, end) ranges of the vector sent uncompressed. */
  private readonly rest: [number, number][] = [];
  readonly restSize: number;

  /**
   * @param seed of the initial Q (equal on every rank).
   * @throws Error when matrices overlap or fall outside the vector, or from PowerSgd's checks.
   */
  constructor(readonly comm: Communicator, readonly gpu: Gpu, layout: GradLayout, readonly rank: number, seed = 0) {
    this.matrices = compressedMatrices(layout, rank).sort((a, b) => a.offset - b.offset);
    let at = 0;
    for (const m of this.matrices) {
      if (m.offset < at || m.offset + m.rows * m.cols > layout.n) {
        throw new Error(
          `PowerSgdAllReduce: matrix ${m.name} at ${m.offset} overlaps another or leaves the ${layout.n} elements`,
        );
      }
      if (m.offset > at) this.rest.push([at, m.offset]);
      at = m.offset + m.rows * m.cols;
    }
    if (at < layout.n) this.rest.push([at, layout.n]);
    this.restSize = this.rest.reduce((s, [a, b]) => s + b - a, 0);
    this.states = this.matrices.map((m, i) => new PowerSgd(gpu, m.rows, m.cols, rank, { seed: seed + i }));
  }

  /**
   * x (n) → the group's average of x, its matrices through rank-r PowerSGD. Sends two ring
   * allReduces: Σ rows·r words, then Σ cols·r + the uncompressed rest.
   * @throws (rejects with) a peer's failure or a call out of step.
   */
  async allReduce(x: Float32Array): Promise<Float32Array> {
    if (this.comm.size === 1) return x;
    const { gpu, states, matrices } = this;
    const gs = matrices.map((m, i) => {
      const g = gpu.upload(x.subarray(m.offset, m.offset + m.rows * m.cols), [m.rows * m.cols], 'f32', 'powersgd.g');
      states[i].stepP(gpu, g);
      return g;
    });
    await this.reduceFactors(states.map((s) => s.p), new Float32Array(0));
    for (const s of states) s.stepQ(gpu);
    const rest = new Float32Array(this.restSize);
    this.rest.reduce((o, [a, b]) => (rest.set(x.subarray(a, b), o), o + b - a), 0);
    const restAvg = await this.reduceFactors(states.map((s) => s.q), rest);
    const out = x.slice();
    this.rest.reduce((o, [a, b]) => (out.set(restAvg.subarray(o, o + b - a), a), o + b - a), 0);
    for (const [i, s] of states.entries()) {
      s.decompress(gpu, gs[i]);
      out.set(await gpu.read(gs[i]) as Float32Array, matrices[i].offset);
      gs[i].release();
    }
    return out;
  }

  /** Releases every matrix's P, Q and residual. */
  release(): void {
    for (const s of this.states) s.release();
  }

  /** Each matrix's warm-started Q and residual, `${name}.q` / `${name}.residual`: what a checkpoint must keep. */
  state(): Record<string, Tensor> {
    return Object.fromEntries(
      this.matrices.flatMap((
        m,
        i,
      ) => [[`${m.name}.q`, this.states[i].q], [`${m.name}.residual`, this.states[i].residual]]),
    );
  }

  /** The residual of matrix i (rows × cols, f32). */
  residual(i: number): Tensor {
    return this.states[i].residual;
  }

  /**
   * Averages the factors `ts` (in place on the GPU) and `extra` (host, returned) in one
   * allReduce: the factors are packed into one buffer so a single read and write move them.
   */
  private async reduceFactors(ts: Tensor[], extra: Float32Array): Promise<Float32Array> {
    const { gpu } = this, n = ts.reduce((s, t) => s + t.size, 0);
    const packed = gpu.empty([n], 'f32', 'powersgd.factors');
    ts.reduce((o, t) => (gpu.copy(t, packed.range(o, t.size)), o + t.size), 0);
    const host = new Float32Array(n + extra.length);
    host.set(await gpu.read(packed) as Float32Array);
    host.set(extra, n);
    await this.comm.allReduce(host, { op: 'avg' });
    gpu.write(packed, host.subarray(0, n));
    ts.reduce((o, t) => (gpu.copy(packed.range(o, t.size), t), o + t.size), 0);
    packed.release(); // later users of the buffer are encoded after the copies
    return host.subarray(n);
  }
}
