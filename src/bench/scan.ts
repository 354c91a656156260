/**
 * Recurrent-mixer benchmark: chunked linear attention (the training path of `--arch linear`)
 * against the sequential per-step recurrence on the same inputs, and Mamba's selective scan,
 * forward + backward at growing T. Chunking trades the recurrence's T sequential steps for
 * T/L chunk steps of small matmuls; the ratio shows what that buys on the adapter at hand.
 */
import type { Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import {
  linearAttentionBackward,
  type LinearAttentionDims,
  linearAttentionForward,
  linearAttentionStateShape,
} from '../kernels/linear_attention.ts';
import {
  recurrentLinearAttentionBackward,
  recurrentLinearAttentionForward,
} from '../kernels/linear_attention_recurrent.ts';
import { type ScanDims, scanStateShape, selectiveScanForward } from '../kernels/selective_scan.ts';
import { selectiveScanBackward } from '../kernels/selective_scan_bwd.ts';
import { type BenchTiming, fill, timeKernels } from './timing.ts';

/** One row: both linear-attention forms and the selective scan at one T (ms, forward + backward). */
export interface ScanBenchRow {
  t: number;
  chunkedMs: number;
  sequentialMs: number;
  /** sequentialMs / chunkedMs. */
  ratio: number;
  scanMs: number;
  /** B·T / scan time (tokens/s through one Mamba mixer). */
  scanTokensPerSec: number;
}

/** Shapes of the benchmark (defaults: one sequence, 4 heads of 64, Mamba D = 256, N = 16). */
export interface ScanBenchShape {
  b?: number;
  heads?: number;
  headSize?: number;
  d?: number;
  n?: number;
}

/** Log-decays in (−0.2, 0): strong enough that the state matters, never exploding. */
function decays(n: number, seed: number): Float32Array {
  return fill(n, seed).map((x) => -0.1 * (x + 1) - 1e-3);
}

/**
 * Times forward + backward of chunked vs sequential linear attention and of the selective scan
 * at each T of `ts`, on tensors allocated once per T and released after.
 */
export async function benchScan(
  gpu: Gpu,
  ts: number[],
  shape: ScanBenchShape = {},
  timing: BenchTiming = {},
): Promise<ScanBenchRow[]> {
  const t = { reps: 3, minRepMs: 50, maxMsPerShape: 20_000, ...timing };
  const { b = 1, heads: h = 4, headSize: hs = 64, d = 256, n = 16 } = shape;
  const rows: ScanBenchRow[] = [];
  for (const T of ts) {
    const owned: Tensor[] = [];
    const up = (data: Float32Array, shp: number[]) => {
      const x = gpu.upload(data, shp, 'f32', 'bench.scan');
      owned.push(x);
      return x;
    };
    const zeros = (shp: number[]) => {
      const x = gpu.zeros(shp, 'f32', 'bench.scan');
      owned.push(x);
      return x;
    };
    const la: LinearAttentionDims = { b, t: T, h, dk: hs, dv: hs, scale: 1 / Math.sqrt(hs) };
    const c = h * hs;
    const [q, k, v] = [1, 2, 3].map((s) => up(fill(b * T * c, s), [b, T, c]));
    const g = up(decays(b * T * h, 4), [b, T, h]);
    const w = up(decays(b * T * c, 5), [b, T, c]);
    const o = zeros([b, T, c]), dout = up(fill(b * T * c, 6), [b, T, c]);
    const states = zeros(linearAttentionStateShape(la));
    const [dq, dk, dv, dw] = [0, 1, 2, 3].map(() => zeros([b, T, c]));
    const dg = zeros([b, T, h]);

    const sd: ScanDims = { b, t: T, d, n };
    const u = up(fill(b * T * d, 7), [b, T, d]),
      delta = up(fill(b * T * d, 8), [b, T, d]),
      z = up(fill(b * T * d, 9), [b, T, d]);
    const A = up(fill(d * n, 10).map((x) => -1 - 4 * (x + 1)), [d, n]);
    const Bm = up(fill(b * T * n, 11), [b, T, n]), Cm = up(fill(b * T * n, 12), [b, T, n]);
    const D = up(fill(d, 13), [d]), bias = up(fill(d, 14), [d]);
    const out = zeros([b, T, d]), dy = up(fill(b * T * d, 15), [b, T, d]);
    const sstates = zeros(scanStateShape(sd));
    const grads = {
      du: zeros([b, T, d]),
      ddelta: zeros([b, T, d]),
      dA: zeros([d, n]),
      dB: zeros([b, T, n]),
      dC: zeros([b, T, n]),
      dD: zeros([d]),
      dbias: zeros([d]),
      dz: zeros([b, T, d]),
    };
    try {
      const [chunkedMs, sequentialMs, scanMs] = await timeKernels(gpu, [
        (batch) => {
          for (let i = 0; i < batch; i++) {
            linearAttentionForward(gpu, q, k, v, g, o, states, la);
            linearAttentionBackward(gpu, q, k, v, g, states, dout, dq, dk, dv, dg, la);
          }
        },
        (batch) => {
          for (let i = 0; i < batch; i++) {
            recurrentLinearAttentionForward(gpu, q, k, v, w, null, o, la);
            recurrentLinearAttentionBackward(gpu, q, k, v, w, null, dout, dq, dk, dv, dw, null, la);
          }
        },
        (batch) => {
          for (let i = 0; i < batch; i++) {
            selectiveScanForward(gpu, u, delta, A, Bm, Cm, D, bias, z, out, sstates, sd);
            selectiveScanBackward(gpu, u, delta, A, Bm, Cm, D, bias, z, sstates, dy, grads, sd);
          }
        },
      ], t);
      rows.push({
        t: T,
        chunkedMs,
        sequentialMs,
        ratio: sequentialMs / chunkedMs,
        scanMs,
        scanTokensPerSec: (b * T) / (scanMs / 1000),
      });
    } finally {
      for (const x of owned) x.release();
    }
  }
  return rows;
}
