/**
 * The block sizes of the block-wise quantisers (int8.ts, int4.ts; docs/design.md#compressors), one list
 * shared by the kernels and the scheme parser (comm/compression.ts). No GPU code: the browser's
 * plan form reads it too.
 */

/**
 * Powers of two from 32 (whole u32 words for 4- and 8-bit codes, one warp) to 4096 (≤ 16 steps
 * per invocation of a 256-wide workgroup).
 */
export const QUANT_BLOCKS = [32, 64, 128, 256, 512, 1024, 2048, 4096] as const;

/** Whether `block` is one of {@link QUANT_BLOCKS}. */
export function isQuantBlock(block: number): boolean {
  return (QUANT_BLOCKS as readonly number[]).includes(block);
}

/**
 * @param kind the quantiser, for the message ('int8', 'int4').
 * @throws Error naming the allowed block sizes unless `block` is one of {@link QUANT_BLOCKS}.
 */
export function checkQuantBlock(kind: string, block: number): void {
  if (!isQuantBlock(block)) {
    throw new Error(`${kind}: block size must be one of ${QUANT_BLOCKS.join(', ')} (a power of two), got ${block}`);
  }
}
