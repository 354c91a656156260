/**
 * NEFTune (Jain et al., "NEFTune: Noisy Embeddings Improve Instruction Finetuning", arXiv
 * 2310.05914, Algorithm 1): during training only, the input embeddings X (B, T, C) get
 * uniform noise ε ~ U(−1, 1) scaled by α/√(T·C). The noise comes from a counter-based hash of
 * (seed, element index), so it needs no state and is reproducible from the seed alone.
 */
import { f32bits, type Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { hash32 } from '../util/random.ts';
import { grid1d } from './grid.ts';

/**
 * The noise unit the kernel draws for element `i` under `seed`: a value in (−1, 1), uniform
 * on a 2²³-point lattice symmetric about 0 (every step exact in f32). This is the CPU twin of shaders/noise.wgsl.
 */
export function noiseValue(seed: number, i: number): number {
  const h = hash32(((hash32(seed >>> 0) ^ hash32(i >>> 0)) + 0x9e3779b9) >>> 0);
  return ((h >>> 9) + 0.5) / 4194304 - 1;
}

/**
 * Adds U(−scale, scale) noise to `x` (any shape, f32) in place: x[i] += scale · noiseValue(seed, first + i)
 * (the index taken mod 2³², as the shader's u32 sum).
 * @param scale half-width of the noise, ≥ 0 (0 leaves x unchanged and dispatches nothing).
 * @param seed any u32; the same seed gives the same noise.
 * @param first the noise index of x's element 0 (x is a slice of a larger tensor, e.g. a micro-batch of the global batch).
 * @throws Error when x is not f32, scale is negative or not finite, or first is not an integer ≥ 0.
 */
export function addUniformNoise(gpu: Gpu, x: Tensor, scale: number, seed: number, first = 0): void {
  if (x.dtype !== 'f32') throw new Error(`addUniformNoise: x must be f32, got ${x.dtype}`);
  if (!Number.isFinite(scale) || scale < 0) {
    throw new Error(`addUniformNoise: scale must be a finite number ≥ 0, got ${scale}`);
  }
  if (!Number.isInteger(first) || first < 0) {
    throw new Error(`addUniformNoise: first must be an integer ≥ 0, got ${first}`);
  }
  if (scale === 0 || x.size === 0) return;
  gpu.dispatch(
    { key: 'noise.add_uniform', code: gpu.shaders.noise, entryPoint: 'add_uniform' },
    [x],
    new Uint32Array([x.size, hash32(seed >>> 0), f32bits(scale), first >>> 0]),
    grid1d(x.size, 256),
  );
}

/**
 * NEFTune on the embedding output x (B, T, C): adds U(−1, 1)·α/√(T·C) in place. The paper
 * scales by the sequence length L = T of the padded batch. Because the noise is added, not
 * multiplied, d(x + ε)/dx = I and the backward pass is unchanged. Element (r, t, c) draws noise
 * index ((row + r)·T + t)·C + c: a row's noise depends on its place in the global batch, not on
 * the micro-batch that holds it.
 * @param opts α ≥ 0 (0 = off; the paper uses 5, 10 or 15), the noise seed and the global row of
 *   x's first row (default 0); undefined = off.
 * @throws Error when x is not (B, T, C) or α is negative.
 */
export function applyNeftune(
  gpu: Gpu,
  x: Tensor,
  b: number,
  t: number,
  c: number,
  opts: { alpha: number; seed: number; row?: number } | undefined,
): void {
  if (!opts || opts.alpha === 0) return;
  if (!(opts.alpha > 0) || !Number.isFinite(opts.alpha)) {
    throw new Error(`NEFTune: alpha must be a finite number ≥ 0, got ${opts.alpha}`);
  }
  if (x.size !== b * t * c) throw new Error(`NEFTune: x [${x.shape}] is not (B=${b}, T=${t}, C=${c})`);
  addUniformNoise(gpu, x, opts.alpha / Math.sqrt(t * c), opts.seed, (opts.row ?? 0) * t * c);
}
