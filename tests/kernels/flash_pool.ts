/**
 * The "no T×T buffer" check both FlashAttention paths (barrier-free and tiled) must pass:
 * a forward + backward at T = 257 through the buffer pool's accounting.
 */
import type { Gpu } from '../../src/gpu/context.ts';
import { randn } from '../util/assert.ts';
import { flashAttentionBackward, flashAttentionForward } from '../../src/kernels/flash_attention.ts';

/**
 * Runs forward + backward and throws unless the largest pool request and the peak growth stay
 * within one (B, nh, T) row (ℓ or D, one at a time, rounded to the pool's 256-byte granule),
 * all scratch is released, and the largest request is far below a (B, nh, T, T) buffer.
 */
export async function checkNoQuadraticAllocation(gpu: Gpu): Promise<void> {
  const [b, t, nh, hs] = [1, 257, 2, 64];
  const c = nh * hs;
  const d = { b, t, c, nh, causal: true };
  const tqkv = gpu.upload(Float32Array.from(randn(b * t * 3 * c, 3, -2, 2)), [b, t, 3 * c]);
  const tdy = gpu.upload(Float32Array.from(randn(b * t * c, 4)), [b, t, c]);
  const ty = gpu.empty([b, t, c]);
  const tlse = gpu.empty([b, nh, t]);
  const tdqkv = gpu.zeros([b, t, 3 * c]);
  await gpu.sync();
  gpu.pool.resetPeak();
  const live = gpu.pool.stats.liveBytes;
  flashAttentionForward(gpu, tqkv, ty, tlse, d);
  flashAttentionBackward(gpu, tqkv, ty, tlse, tdy, tdqkv, d);
  await gpu.sync();
  const { largestBytes, peakBytes } = gpu.pool.stats;
  const rowBytes = Math.ceil((b * nh * t * 4) / 256) * 256;
  if (largestBytes > rowBytes) {
    throw new Error(`largest request ${largestBytes} B > one (B, nh, T) row's ${rowBytes} B`);
  }
  if (peakBytes - live > rowBytes) throw new Error(`peak grew by ${peakBytes - live} B > ${rowBytes} B`);
  if (gpu.pool.stats.liveBytes !== live) throw new Error('scratch not released');
  // For scale: the naive kernels need a (B, nh, T, T) buffer for P and another for dS.
  if (!(largestBytes < b * nh * t * t * 4 / 100)) throw new Error('unexpectedly large');
  for (const x of [tqkv, tdy, ty, tlse, tdqkv]) x.release();
}
