/**
 * Named device peaks for MFU (model FLOPs utilisation: achieved model FLOP/s over the peak).
 * Dense rates, no structured sparsity, in TFLOP/s, from the vendors' datasheets:
 * - h100-sxm: NVIDIA H100 Tensor Core GPU datasheet, SXM column (FP32 67; FP16/BF16 Tensor
 *   1979 with sparsity, so 989 dense).
 * - h200: NVIDIA H200 Tensor Core GPU datasheet, SXM column (the same figures as the H100 SXM).
 * - a100-80g: NVIDIA A100 Tensor Core GPU datasheet, SXM column (FP32 19.5; FP16 Tensor 312 dense).
 * - mi250x: AMD Instinct MI250X data sheet (FP32 vector 47.9; FP16 matrix 383), the whole
 *   module (two GCDs).
 * - m2-max: Apple's M2 Max announcement (January 2023: 38-core GPU, 13.6 TFLOPS FP32). Apple
 *   gives one figure; the GPU has no matrix units, so its f16 rate is taken as the same.
 * - cpu-lavapipe: no datasheet (Mesa's software Vulkan on the host CPU). A nominal 8-core AVX2
 *   host: 8 cores × 3 GHz × 32 FLOP/cycle (two 8-lane FMA units) = 0.768; lavapipe computes
 *   f16 in f32. Measure the real machine with `npm run bench` (src/perf/device_profile.ts).
 * Our kernels compute in f32 on the shader cores, so the f32 peak is the fair denominator for an
 * f32 run; the f16 figure is what a tensor-core f16 run is measured against.
 */

/** One device's dense peaks (TFLOP/s). */
export interface DevicePeak {
  f32: number;
  f16: number;
  source: string;
}

/** Every profile `--device` accepts. */
export const DEVICE_PEAKS: Record<string, DevicePeak> = {
  'h100-sxm': { f32: 67, f16: 989, source: 'NVIDIA H100 datasheet (SXM)' },
  h200: { f32: 67, f16: 989, source: 'NVIDIA H200 datasheet (SXM)' },
  'a100-80g': { f32: 19.5, f16: 312, source: 'NVIDIA A100 datasheet (SXM)' },
  mi250x: { f32: 47.9, f16: 383, source: 'AMD Instinct MI250X data sheet' },
  'm2-max': { f32: 13.6, f16: 13.6, source: 'Apple M2 Max announcement (38-core GPU)' },
  'cpu-lavapipe': { f32: 0.768, f16: 0.768, source: 'nominal 8-core AVX2 host (no datasheet)' },
};

/**
 * The peak a run is measured against: `--peak-tflops` when given (> 0), else the named profile's
 * f32 peak, else 0 (MFU not printed).
 * @throws Error naming the profiles allowed when `device` is not one of them.
 */
export function peakTflops(peak: number | undefined, device: string | undefined): number {
  if (peak !== undefined && peak > 0) return peak;
  if (device === undefined) return 0;
  const p = DEVICE_PEAKS[device];
  if (!p) throw new Error(`unknown --device '${device}'; allowed: ${Object.keys(DEVICE_PEAKS).join(', ')}`);
  return p.f32;
}
