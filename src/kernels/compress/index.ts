/**
 * Gradient/activation compressors (issue 14): fp16 and bf16 casts, block-wise int8 and int4, top-k,
 * 1-bit sign (the {@link Compressor} interface, wrapped by {@link ErrorFeedback} where a
 * residual is needed) and PowerSGD, whose two-step form ({@link PowerSgd}) leaves room for the
 * allReduces of P and Q. References: src/reference/compress.ts.
 */
export * from './compressor.ts';
export { bf16Compressor, fp16Compressor, packBf16, unpackBf16 } from './cast.ts';
export { checkQuantBlock, isQuantBlock, QUANT_BLOCKS } from './blocks.ts';
export { dequantizeInt4, int4Compressor, quantizeInt4 } from './int4.ts';
export { checkInt8Block, dequantizeInt8, INT8_BLOCKS, int8Compressor, quantizeInt8 } from './int8.ts';
export { signCompress, signCompressor, signDecompress } from './sign.ts';
export { TOPK_MAX_N, topKCompressor, topKCount, topKScatter, topKSelect } from './topk.ts';
export { orthogonalise, PowerSgd, powerSgdInitialQ, type PowerSgdOptions } from './powersgd.ts';
