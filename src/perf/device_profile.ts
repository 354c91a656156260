/**
 * Device profiles for the step-time model (docs/design.md#a-performance-model-that-chooses-the-plan): peak FLOP/s and
 * memory from the datasheets (src/perf/devices.ts DEVICE_PEAKS holds the peaks and their sources), HBM bandwidth, and
 * the achieved rate of a GEMM or an attention core by shape.
 *
 * The rate curve: a GEMM of M×N×K reaches `efficiency` of the peak when large; smaller ones
 * saturate as x/(x + halfDim) in their smallest dimension x (arithmetic intensity and the
 * number of thread blocks both grow with it); the output is computed in tile×tile blocks, so
 * M and N are padded up to the tile (tile quantisation); and a dimension that is not a
 * multiple of `align` elements (16 bytes of f16 for the tensor cores) runs the slow path at
 * `misaligned` of the rate. Attention (FlashAttention) pads the head size to a multiple of 32
 * and saturates in it the same way. Efficiencies, half-dimensions and penalties are
 * calibration constants, stated per profile, not datasheet figures: no per-row fudge.
 *
 * Sources beyond DEVICE_PEAKS: memory and bandwidth from the same datasheets (H100 SXM 80 GB
 * HBM3 3.35 TB/s; A100 SXM 80 GB HBM2e 2,039 GB/s; MI250X 128 GB HBM2e 3.2 TB/s; M2 Max up to
 * 96 GB unified at 400 GB/s). `cpu-lavapipe` is nominal (see devices.ts); measure the real host
 * with `npm run plan -- --calibrate --out FILE` (src/bench/calibrate.ts; or only its matmul rate curve with
 * `npm run bench -- matmul --json FILE`) and pass `--device FILE`.
 */
import { z } from 'zod';
import { DEVICE_PEAKS } from './devices.ts';
import { fitGemm } from './calibration_fit.ts';
import { NetworkModel } from '../comm/network.ts';

/** Units: FLOP/s, bytes, bytes/s; the shape constants are elements. */
export interface DeviceProfile {
  name: string;
  source: string;
  /** Dense peaks, FLOP/s: f32 on the shader cores, f16/bf16 on matrix units where present. */
  peakF32: number;
  peakF16: number;
  /** Device memory, bytes. */
  memoryBytes: number;
  /** Memory bandwidth, bytes/s (the memory-bound ops: norms, activations, softmax, optimizer). */
  memBandwidth: number;
  gemm: { efficiency: number; halfDim: number; tile: number; align: number; misaligned: number };
  attention: { efficiency: number; halfHeadDim: number };
  /**
   * Seconds of fixed cost per kernel dispatch (measured by `npm run plan -- --calibrate`; absent: 0). Enters
   * step_time.ts as DISPATCHES_PER_LAYER dispatches per layer and pass, plus the LM head's, on the critical path.
   */
  launchOverheadS?: number;
  /**
   * Seconds of one submit-and-wait round trip between host and device (measured by `--calibrate`; absent: 0). Enters
   * step_time.ts once per collective call: worker ranks read each tensor back to the host to send it.
   */
  hostRoundTripS?: number;
  /**
   * The worker data planes' links measured by `--calibrate` (α µs, β GB/s per plane, first = the one priced).
   * Enters predictStep through the NetworkModel {@link networkOf} builds when `--net` is not given.
   */
  dataPlanes?: { plane: string; alphaUs: number; betaGBps: number }[];
  /** What `--calibrate` measured, kept for the record (not read by the model). */
  calibration?: unknown;
}

/** The compute precision priced: bf16/f16 on the matrix units, or f32 (this sandbox's kernels). */
export type Dtype = 'bf16' | 'f32';

const GiB = 2 ** 30;
const peak = (name: string) => ({
  peakF32: DEVICE_PEAKS[name].f32 * 1e12,
  peakF16: DEVICE_PEAKS[name].f16 * 1e12,
  source: DEVICE_PEAKS[name].source,
});

/** Every named profile `--device` accepts. */
export const DEVICE_PROFILES: Record<string, DeviceProfile> = {
  'h100-sxm': {
    name: 'h100-sxm',
    ...peak('h100-sxm'),
    memoryBytes: 80 * GiB,
    memBandwidth: 3.35e12,
    gemm: { efficiency: 0.75, halfDim: 128, tile: 128, align: 8, misaligned: 0.5 },
    attention: { efficiency: 0.45, halfHeadDim: 32 },
  },
  'a100-80g': {
    name: 'a100-80g',
    ...peak('a100-80g'),
    memoryBytes: 80 * GiB,
    memBandwidth: 2.039e12,
    gemm: { efficiency: 0.8, halfDim: 96, tile: 128, align: 8, misaligned: 0.5 },
    attention: { efficiency: 0.6, halfHeadDim: 32 },
  },
  mi250x: {
    name: 'mi250x',
    ...peak('mi250x'),
    memoryBytes: 128 * GiB,
    memBandwidth: 3.2e12,
    gemm: { efficiency: 0.55, halfDim: 128, tile: 128, align: 8, misaligned: 0.5 },
    attention: { efficiency: 0.35, halfHeadDim: 32 },
  },
  'm2-max': {
    name: 'm2-max',
    ...peak('m2-max'),
    memoryBytes: 96 * GiB,
    memBandwidth: 400e9,
    gemm: { efficiency: 0.7, halfDim: 64, tile: 32, align: 4, misaligned: 0.7 },
    attention: { efficiency: 0.5, halfHeadDim: 32 },
  },
  'cpu-lavapipe': {
    name: 'cpu-lavapipe',
    ...peak('cpu-lavapipe'),
    memoryBytes: 16 * GiB,
    memBandwidth: 50e9,
    gemm: { efficiency: 0.25, halfDim: 32, tile: 16, align: 4, misaligned: 0.8 },
    attention: { efficiency: 0.2, halfHeadDim: 32 },
  },
};

/** The peak FLOP/s a dtype runs at on `dev`. */
export const peakFlops = (dev: DeviceProfile, dtype: Dtype) => (dtype === 'f32' ? dev.peakF32 : dev.peakF16);

const padTo = (x: number, q: number) => Math.ceil(x / q) * q;

/**
 * A device that runs every GEMM and attention core at `peak` FLOP/s and moves memory for free:
 * the simulated clock's compute under `--net …;peak=` (the network model's one compute figure).
 */
export function flatProfile(peak: number): DeviceProfile {
  return {
    name: `flat ${peak / 1e9} GFLOP/s`,
    source: "the network model's modelled peak",
    peakF32: peak,
    peakF16: peak,
    memoryBytes: Infinity,
    memBandwidth: Infinity,
    gemm: { efficiency: 1, halfDim: 0, tile: 1, align: 1, misaligned: 1 },
    attention: { efficiency: 1, halfHeadDim: 0 },
  };
}

/**
 * Achieved FLOP/s of one M×N×K GEMM (2·M·N·K FLOPs) on `dev` (see the module doc).
 * @throws Error for a non-positive dimension.
 */
export function gemmRate(dev: DeviceProfile, dtype: Dtype, m: number, n: number, k: number): number {
  if (!(m > 0 && n > 0 && k > 0)) throw new Error(`gemmRate: dimensions must be positive, got ${m}×${n}×${k}`);
  const g = dev.gemm, x = Math.min(m, n, k);
  const quant = (m * n) / (padTo(m, g.tile) * padTo(n, g.tile));
  const aligned = [m, n, k].every((d) => Number.isInteger(d) && d % g.align === 0);
  return peakFlops(dev, dtype) * g.efficiency * (x / (x + g.halfDim)) * quant * (aligned ? 1 : g.misaligned);
}

/** Seconds of one M×N×K GEMM at {@link gemmRate}. */
export const gemmSeconds = (dev: DeviceProfile, dtype: Dtype, m: number, n: number, k: number) =>
  (2 * m * n * k) / gemmRate(dev, dtype, m, n, k);

/**
 * Achieved FLOP/s of a fused attention core (FlashAttention, Dao et al. arXiv 2205.14135) with
 * head size `hs`: the kernel pads the head to a multiple of 32 and saturates in it.
 */
export function attentionRate(dev: DeviceProfile, dtype: Dtype, hs: number): number {
  const a = dev.attention, used = hs / padTo(hs, 32);
  return peakFlops(dev, dtype) * a.efficiency * (hs / (hs + a.halfHeadDim)) * used;
}

const positive = z.number().positive();

/** A profile saved as JSON (the {@link DeviceProfile} fields; units as there). */
export const DeviceProfileSchema = z.object({
  name: z.string().min(1),
  source: z.string().default('measured'),
  peakF32: positive,
  peakF16: positive,
  memoryBytes: positive,
  memBandwidth: positive,
  gemm: z.object({
    efficiency: z.number().gt(0).max(1),
    halfDim: z.number().min(0),
    tile: z.number().int().min(1),
    align: z.number().int().min(1),
    misaligned: z.number().gt(0).max(1),
  }),
  attention: z.object({ efficiency: z.number().gt(0).max(1), halfHeadDim: z.number().min(0) }),
  launchOverheadS: z.number().min(0).optional(),
  hostRoundTripS: z.number().min(0).optional(),
  dataPlanes: z.array(z.object({ plane: z.string().min(1), alphaUs: z.number().min(0), betaGBps: positive })).min(1)
    .optional(),
  calibration: z.unknown().optional(),
});

/**
 * The network a plan is priced on: `--net`'s text when given, else a flat network over the profile's first measured
 * data plane (`link=βGB/s,αus`), else the `nvlink-ib` preset.
 */
export function networkOf(dev: DeviceProfile, net: string | undefined): NetworkModel {
  const d = dev.dataPlanes?.[0];
  if (net !== undefined || !d) return NetworkModel.parse(net ?? 'nvlink-ib');
  return NetworkModel.parse(`link=${+d.betaGBps.toPrecision(4)}GB/s,${+d.alphaUs.toPrecision(4)}us`);
}

/** The part of `npm run bench -- matmul --json FILE`'s output a profile is fitted from. */
const BenchJsonSchema = z.object({
  adapter: z.string().default('measured adapter'),
  memoryBytes: positive.optional(),
  results: z.object({
    matmul: z.object({
      squares: z.array(z.object({ m: positive, n: positive, k: positive, gflops: positive, kernel: z.string() })),
      training: z.array(z.object({ m: positive, n: positive, k: positive, gflops: positive })).default([]),
    }),
  }),
});

/**
 * A profile fitted to a matmul benchmark: for each half-dimension on a grid, the saturated rate
 * R minimising Σ(gflops − R·x/(x+half))² over the shipped kernel's rows (x = smallest dimension),
 * keeping the best; peak = R at efficiency 1, f16 = f32 (WebGPU kernels compute in f32). The
 * bench measures neither memory nor bandwidth: `memoryBytes` from the file, else 16 GiB, and
 * bandwidth R/10 bytes/s (an arithmetic intensity of 10 FLOP/byte for the memory-bound ops).
 */
export function profileFromBench(json: z.infer<typeof BenchJsonSchema>, name: string): DeviceProfile {
  const mm = json.results.matmul;
  const rows = [...mm.squares.filter((r) => r.kernel === 'shipped'), ...mm.training];
  if (!rows.length) throw new Error(`device profile ${name}: the bench file has no shipped matmul rows`);
  const fit = fitGemm(rows);
  const R = fit.rGflops * 1e9;
  return {
    name,
    source: `fitted to npm run bench on ${json.adapter}`,
    peakF32: R,
    peakF16: R,
    memoryBytes: json.memoryBytes ?? 16 * GiB,
    memBandwidth: R / 10,
    gemm: { efficiency: 1, halfDim: fit.halfDim, tile: 16, align: 4, misaligned: 0.8 },
    attention: { efficiency: 0.5, halfHeadDim: 32 },
  };
}

/** Deno's file reading, looked up at call time: the page's Plan explorer imports this module too (named profiles only). */
const denoFs = () => (globalThis as unknown as { Deno: { readTextFile(path: string): Promise<string> } }).Deno;

/**
 * The profile `--device` names: a key of {@link DEVICE_PROFILES}, or a JSON file holding either
 * a profile ({@link DeviceProfileSchema}) or the output of `npm run bench -- matmul --json FILE`.
 * @throws Error naming the profiles allowed, or the file and its first invalid field.
 */
export async function deviceProfile(spec: string): Promise<DeviceProfile> {
  const named = DEVICE_PROFILES[spec];
  if (named) return named;
  const allowed = `allowed: ${Object.keys(DEVICE_PROFILES).join(', ')}, or a .json profile / npm run bench output`;
  if (!spec.endsWith('.json')) throw new Error(`unknown --device '${spec}'; ${allowed}`);
  let raw: unknown;
  try {
    raw = JSON.parse(await denoFs().readTextFile(spec));
  } catch (e) {
    throw new Error(`--device ${spec}: cannot read a JSON file (${(e as Error).message}); ${allowed}`);
  }
  return parseDeviceJson(raw, spec);
}

/** {@link deviceProfile}'s parse of a JSON value read from `where`. @throws Error naming the invalid field. */
export function parseDeviceJson(raw: unknown, where: string): DeviceProfile {
  if (raw && typeof raw === 'object' && 'results' in raw) {
    const b = BenchJsonSchema.safeParse(raw);
    if (!b.success) throw new Error(`--device ${where}: not a matmul bench file: ${fieldError(b.error)}`);
    return profileFromBench(b.data, where);
  }
  const p = DeviceProfileSchema.safeParse(raw);
  if (!p.success) throw new Error(`--device ${where}: invalid device profile: ${fieldError(p.error)}`);
  return p.data;
}

const fieldError = (e: z.ZodError) => {
  const i = e.issues[0];
  return `${i.path.join('.') || '(root)'}: ${i.message}`;
};
