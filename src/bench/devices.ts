/**
 * Named device peaks for MFU (model FLOPs utilisation: achieved model FLOP/s over the peak).
 * Dense rates, no structured sparsity, in TFLOP/s, from the vendors' datasheets:
 * - h100-sxm: NVIDIA H100 Tensor Core GPU datasheet, SXM column (FP32 67; FP16/BF16 Tensor
 *   1979 with sparsity, so 989 dense).
 * - h200: NVIDIA H200 Tensor Core GPU datasheet, SXM column (the same figures as the H100 SXM).
 * - a100-80g: NVIDIA A100 Tensor Core GPU datasheet, SXM column (FP32 19.5; FP16 Tensor 312 dense).
 * - mi250x: AMD Instinct MI250X data sheet (FP32 vector 47.9; FP16 matrix 383).
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
