/**
 * The kernel sweeps of the scale suite (scale.ts): matmul GFLOP/s by size against each tile forced,
 * the plain kernel, f16 operands and the other subgroup setting; FlashAttention forward + backward
 * by sequence length and head size, with f16 q, k, v and the other subgroup setting where the
 * adapter has each (docs/design.md#runtime-quirks).
 */
import type { Gpu } from '../gpu/context.ts';
import { matmul, matmulPlain, matmulTuning } from '../kernels/matmul.ts';
import { castToF16 } from '../kernels/cast.ts';
import { fill, timeKernels } from './timing.ts';
import { benchAttention } from './attention.ts';
import { withSubgroups } from './subgroups.ts';
import type { ScaleAttentionRow, ScaleMatmulRow, ScaleShapes } from './scale.ts';

/**
 * Causal attention FLOPs of forward + backward: forward 4·b·nh·T²·hs halved by the mask, backward
 * 2.5 times the forward (FlashAttention-2's convention, Dao 2023, arXiv 2307.08691 §4).
 */
export function attentionFlops(b: number, nh: number, t: number, hs: number): number {
  return 3.5 * 2 * b * nh * t * t * hs;
}

/** Runs the matmul sweep (f32, NN, beta 0). */
export async function scaleMatmul(gpu: Gpu, sizes: number[]): Promise<ScaleMatmulRow[]> {
  const rows: ScaleMatmulRow[] = [];
  for (const n of sizes) {
    const a = gpu.upload(fill(n * n, 1), [n, n], 'f32', 'scale.a');
    const b = gpu.upload(fill(n * n, 2), [n, n], 'f32', 'scale.b');
    const c = gpu.empty([n, n], 'f32', 'scale.c');
    const withTile = (tile: 0 | 64 | 128) => (batch: number) => {
      const saved = { ...matmulTuning };
      Object.assign(matmulTuning, { tile, forceTiled: tile !== 0, forceRegister: false });
      try {
        for (let i = 0; i < batch; i++) matmul(gpu, a, b, c, n, n, n);
      } finally {
        Object.assign(matmulTuning, saved);
      }
    };
    const plain = (batch: number) => {
      for (let i = 0; i < batch; i++) matmulPlain(gpu, a, b, c, n, n, n);
    };
    const f16 = gpu.features.has('shader-f16');
    const a16 = f16 ? gpu.empty([n, n], 'f16', 'scale.a16') : null;
    const b16 = f16 ? gpu.empty([n, n], 'f16', 'scale.b16') : null;
    if (a16 && b16) {
      castToF16(gpu, a, a16);
      castToF16(gpu, b, b16);
    }
    const half = (batch: number) => {
      for (let i = 0; i < batch; i++) matmul(gpu, a16!, b16!, c, n, n, n);
    };
    // Where the device has subgroups, the other setting than the shipped one is timed too.
    const sg = gpu.features.has('subgroups');
    const flipped = (batch: number) => withSubgroups(gpu, !gpu.subgroups, () => withTile(0)(batch));
    try {
      const t = { reps: 3, minRepMs: 50, maxMsPerShape: 5_000 };
      const kernels = [withTile(0), withTile(64), withTile(128), plain, half, flipped];
      const on = [true, true, true, true, f16, sg];
      const times = await timeKernels(gpu, kernels.filter((_, i) => on[i]), t);
      const [shipped, t64, t128, tp, th, tf] = on.map((x) => (x ? times.shift() : undefined));
      const [tOn, tOff] = !sg ? [] : gpu.subgroups ? [shipped, tf] : [tf, shipped];
      const gf = (ms: number) => (2 * n ** 3) / (ms * 1e6);
      rows.push({
        n,
        ms: shipped!,
        gflops: gf(shipped!),
        tile64Gflops: gf(t64!),
        tile128Gflops: gf(t128!),
        plainGflops: gf(tp!),
        f16Gflops: th === undefined ? null : gf(th),
        subgroupGflops: tOn === undefined ? null : gf(tOn),
        noSubgroupGflops: tOff === undefined ? null : gf(tOff),
      });
    } finally {
      for (const x of [a, b, c, a16, b16]) x?.release();
    }
  }
  return rows;
}

/**
 * Runs the FlashAttention sweep (causal, f32), and the same shapes with f16 q, k, v (shader-f16)
 * and with the subgroup kernels off (subgroups) where the device has each; a shape over a device
 * limit keeps its note.
 */
export async function scaleAttention(gpu: Gpu, a: ScaleShapes['attention']): Promise<ScaleAttentionRow[]> {
  const out: ScaleAttentionRow[] = [];
  const sweep = (hs: number, half = false) =>
    benchAttention(gpu, { sizes: a.t, b: a.b, nh: a.nh, hs, reps: 3, kernels: ['flash'], half });
  for (const hs of a.hs) {
    const rows = await sweep(hs);
    const f16 = gpu.features.has('shader-f16') ? await sweep(hs, true) : null;
    const sg = gpu.features.has('subgroups');
    const flipped = sg ? await withSubgroups(gpu, !gpu.subgroups, () => sweep(hs)) : null;
    const [on, off] = !sg ? [null, null] : gpu.subgroups ? [rows, flipped] : [flipped, rows];
    for (const [i, r] of rows.entries()) {
      const tflops = r.ms === null ? null : attentionFlops(a.b, a.nh, r.t, hs) / (r.ms * 1e9);
      out.push({
        t: r.t,
        hs,
        nh: a.nh,
        b: a.b,
        ms: r.ms,
        tflops,
        peakBytes: r.peakBytes,
        variant: r.variant,
        note: r.note,
        f16Ms: f16?.[i].ms ?? null,
        subgroupMs: on?.[i].ms ?? null,
        noSubgroupMs: off?.[i].ms ?? null,
      });
    }
  }
  return out;
}
