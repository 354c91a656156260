/**
 * Attention benchmark: forward + backward of the naive kernels (src/kernels/attention.ts, which
 * keep P and dS as (B, nh, T, T) buffers) against FlashAttention-2 (src/kernels/flash_attention.ts,
 * no T×T buffer; Dao 2023, arXiv 2307.08691), on the same inputs in alternating repetitions so a
 * busy machine slows both alike. Reports median wall time and the pool's peak allocation during
 * the call: the memory claim holds on any adapter, the speed claim (flash faster from T ≈ 1024)
 * only on a real GPU, where flash runs its shared-memory tiled kernels.
 */
import type { Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { DeviceLimitError } from '../gpu/limits.ts';
import { attentionBackward, attentionForward } from '../kernels/attention.ts';
import {
  flashAttentionBackward,
  flashAttentionForward,
  flashTilesFor,
  flashTuning,
} from '../kernels/flash_attention.ts';
import { castToF16 } from '../kernels/cast.ts';

/** Shape and timing knobs of {@link benchAttention}. */
export interface AttentionBenchOptions {
  /** Sequence lengths (default {@link defaultAttentionSizes}). */
  sizes?: number[];
  /** Batch (default 1), heads (default 4), head size (default 64, at most 128 for flash). */
  b?: number;
  nh?: number;
  hs?: number;
  /** Causal masking (default true). */
  causal?: boolean;
  /** Timed repetitions after one warm-up call each (median taken; default 3). */
  reps?: number;
  /** Run flash's shared-memory tiled kernels on a CPU adapter too (default false: GPUs only). */
  tiled?: boolean;
  /** Which kernels to time (default both; the scale suite times flash alone). */
  kernels?: readonly ('naive' | 'flash')[];
  /** Flash reads q, k, v from an f16 copy (mixed precision; needs shader-f16; default false). */
  half?: boolean;
}

/** One (T, kernel) measurement; `ms` and `peakBytes` are null when the call does not fit the device. */
export interface AttentionBenchRow {
  t: number;
  kernel: 'naive' | 'flash';
  /** Median wall time of forward + backward, GPU work included (ms). */
  ms: number | null;
  /** Pool bytes the call allocated at its peak (saved activations, outputs and scratch). */
  peakBytes: number | null;
  /** Why the cell is empty, e.g. the DeviceLimitError's message. */
  note?: string;
  /** Which flash kernels ran (flash rows only). */
  variant?: string;
}

/** T = 128 … 2048 on CPU adapters (naive at 2048 already takes seconds there), … 8192 on GPUs. */
export function defaultAttentionSizes(gpu: Gpu): number[] {
  return gpu.isCpu ? [128, 256, 512, 1024, 2048] : [128, 256, 512, 1024, 2048, 4096, 8192];
}

/**
 * Parses the `--attn` flag, `b=1,nh=4,hs=64,causal=1,reps=3,tiled=0` (any subset, any order).
 * @throws Error naming the key or value that is not allowed.
 */
export function parseAttentionFlag(s: string): AttentionBenchOptions {
  const out: AttentionBenchOptions = {};
  for (const part of s.split(',').filter((x) => x.trim())) {
    const [k, v, extra] = part.split('=').map((x) => x.trim());
    const n = Number(v);
    if (extra !== undefined || !['b', 'nh', 'hs', 'causal', 'reps', 'tiled'].includes(k)) {
      throw new Error(
        `--attn expects b=, nh=, hs=, causal=, reps=, tiled= pairs separated by commas, got '${part}'`,
      );
    }
    const flag = k === 'causal' || k === 'tiled';
    if (!Number.isInteger(n) || n < (flag ? 0 : 1) || (flag && n > 1)) {
      throw new Error(`--attn ${k} must be ${flag ? '0 or 1' : 'a positive integer'}, got '${v}'`);
    }
    if (flag) out[k] = n === 1;
    else out[k as 'b' | 'nh' | 'hs' | 'reps'] = n;
  }
  return out;
}

function fill(n: number, seed: number, amp: number): Float32Array {
  // Uniform in [-amp, amp) from a small LCG: deterministic, no denormals or NaNs.
  const out = new Float32Array(n);
  let s = seed >>> 0;
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    out[i] = amp * (s / 2 ** 31 - 1);
  }
  return out;
}

/**
 * For each T of `opts.sizes`: forward + backward of naive and flash attention on qkv (B, T, 3C),
 * dy (B, T, C), accumulating into dqkv (B, T, 3C). Each call allocates what it saves between
 * forward and backward (y, and att (B, nh, T, T) or lse (B, nh, T)) from the pool and releases
 * it after, so `peakBytes` (pool peak − live bytes before the call) counts saved activations and
 * kernel scratch alike. A call whose buffers exceed a device limit (naive's T×T buffers past
 * 128 MiB) is reported with a note instead of a time.
 * @throws Error when a shape option is not a positive integer, or hs is over 128.
 */
export async function benchAttention(
  gpu: Gpu,
  opts: AttentionBenchOptions = {},
): Promise<AttentionBenchRow[]> {
  const forced = flashTuning.forceTiled;
  flashTuning.forceTiled = opts.tiled ?? forced;
  try {
    return await benchSizes(gpu, opts);
  } finally {
    flashTuning.forceTiled = forced;
  }
}

async function benchSizes(gpu: Gpu, opts: AttentionBenchOptions): Promise<AttentionBenchRow[]> {
  const { b = 1, nh = 4, hs = 64, causal = true, reps = 3 } = opts;
  const sizes = opts.sizes ?? defaultAttentionSizes(gpu);
  for (const [k, v] of Object.entries({ b, nh, hs, reps })) {
    if (!Number.isInteger(v) || v < 1) {
      throw new Error(`benchAttention: ${k} must be a positive integer, got ${v}`);
    }
  }
  if (hs > 128) {
    throw new Error(`benchAttention: hs must be at most 128 (flash attention's limit), got ${hs}`);
  }
  const c = nh * hs;
  const rows: AttentionBenchRow[] = [];
  for (const t of sizes) {
    const d = { b, t, c, nh, causal };
    const qkv = gpu.upload(fill(b * t * 3 * c, 1, 2), [b, t, 3 * c], 'f32', 'bench.qkv');
    const dy = gpu.upload(fill(b * t * c, 2, 1), [b, t, c], 'f32', 'bench.dy');
    const dqkv = gpu.zeros([b, t, 3 * c], 'f32', 'bench.dqkv');
    const qkv16 = opts.half ? gpu.empty([b, t, 3 * c], 'f16', 'bench.qkv16') : null;
    if (qkv16) castToF16(gpu, qkv, qkv16);
    const calls = {
      naive: () => {
        const y = gpu.empty([b, t, c], 'f32', 'bench.y');
        let att: Tensor | undefined;
        try {
          att = gpu.empty([b, nh, t, t], 'f32', 'bench.att');
          attentionForward(gpu, qkv, y, att, d);
          attentionBackward(gpu, qkv, att, dy, dqkv, d);
        } finally {
          y.release();
          att?.release();
        }
      },
      flash: () => {
        const y = gpu.empty([b, t, c], 'f32', 'bench.y');
        const lse = gpu.empty([b, nh, t], 'f32', 'bench.lse');
        try {
          flashAttentionForward(gpu, qkv16 ?? qkv, y, lse, d);
          flashAttentionBackward(gpu, qkv16 ?? qkv, y, lse, dy, dqkv, d);
        } finally {
          y.release();
          lse.release();
        }
      },
    };
    const kernels = opts.kernels ?? (['naive', 'flash'] as const);
    const times: Record<string, number[]> = { naive: [], flash: [] };
    const peak: Record<string, number | null> = { naive: null, flash: null };
    const notes: Record<string, string | undefined> = {};
    try {
      for (let rep = -1; rep < reps; rep++) {
        for (const k of kernels) {
          if (notes[k]) continue;
          await gpu.sync();
          gpu.pool.resetPeak();
          const live = gpu.pool.stats.liveBytes;
          const t0 = performance.now();
          try {
            calls[k]();
            await gpu.sync();
          } catch (e) {
            if (!(e instanceof DeviceLimitError)) throw e;
            notes[k] = `over the device limit (${e.message})`;
            continue;
          }
          // The first call compiles pipelines and fills the pool: a warm-up, not timed.
          if (rep >= 0) times[k].push(performance.now() - t0);
          peak[k] = gpu.pool.stats.peakBytes - live;
        }
      }
    } finally {
      for (const x of [qkv, dy, dqkv, qkv16]) x?.release();
    }
    for (const k of kernels) {
      const ts = times[k].sort((x, y) => x - y);
      const variant = k === 'flash' ? flashVariant(gpu, hs, b * nh * t) : undefined;
      rows.push({
        t,
        kernel: k,
        ms: ts.length ? ts[ts.length >> 1] : null,
        peakBytes: notes[k] ? null : peak[k],
        note: notes[k],
        variant,
      });
    }
  }
  return rows;
}

function flashVariant(gpu: Gpu, hs: number, rows: number): string {
  const tiles = flashTilesFor(gpu, hs, rows);
  return tiles ? `tiled Br×Bc ${tiles.br}×${tiles.bc}` : 'barrier-free';
}

/**
 * The rows of {@link benchAttention} as table cells: T, naive and flash ms, time ratio
 * naive/flash, naive and flash peak MiB, memory ratio, which flash kernels ran; plus a one-line
 * verdict on speed.
 */
export function attentionTable(
  rows: AttentionBenchRow[],
): { header: string[]; cells: string[][]; verdict: string } {
  const f = (x: number) => (x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2));
  const mib = (x: number) => f(x / 2 ** 20);
  const cells: string[][] = [];
  let fasterFrom: number | null = null;
  let compared = false;
  for (const n of rows.filter((r) => r.kernel === 'naive')) {
    const fl = rows.find((r) => r.kernel === 'flash' && r.t === n.t)!;
    const over = 'over the device limit';
    const ratio = n.ms !== null && fl.ms !== null ? n.ms / fl.ms : null;
    compared ||= ratio !== null;
    if (ratio !== null && ratio > 1) fasterFrom ??= n.t;
    else if (ratio !== null) fasterFrom = null;
    cells.push([
      String(n.t),
      n.ms === null ? over : f(n.ms),
      fl.ms === null ? over : f(fl.ms),
      ratio === null ? '–' : `${ratio.toFixed(2)}×`,
      n.peakBytes === null ? over : mib(n.peakBytes),
      fl.peakBytes === null ? over : mib(fl.peakBytes),
      n.peakBytes !== null && fl.peakBytes ? `${(n.peakBytes / fl.peakBytes).toFixed(0)}×` : '–',
      fl.variant ?? '',
    ]);
  }
  const verdict = !compared
    ? 'no T had timings of both kernels'
    : fasterFrom === null
    ? 'flash is not faster than naive at the largest timed T on this adapter'
    : `flash is faster than naive from T = ${fasterFrom} on this adapter`;
  const header = [
    'T',
    'naive ms',
    'flash ms',
    'time naive/flash',
    'naive peak MiB',
    'flash peak MiB',
    'memory naive/flash',
    'flash kernels',
  ];
  return { header, cells, verdict };
}
