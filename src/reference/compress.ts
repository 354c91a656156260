/**
 * f64 references of the compressors (src/kernels/compress/) and the host side of their wire
 * formats: packed bf16 halves, int8 bytes, int4 nibbles and sign bits, decoded here so tests compare the
 * GPU's words with these values exactly (docs/design.md#kernel-references-and-test-cases).
 */
import { bf16RoundRef } from './cast.ts';

/** Round to nearest, ties to even (WGSL's round()). */
export function roundHalfEven(v: number): number {
  const f = Math.floor(v), d = v - f;
  return d > 0.5 || (d === 0.5 && f % 2 !== 0) ? f + 1 : f;
}

/** The bf16 wire words of x: each value rounded to bf16 (bf16RoundRef), upper halves two per u32. */
export function bf16PackRef(x: Float64Array): Uint32Array {
  const hi = new Uint32Array(Float32Array.from(bf16RoundRef(x)).buffer);
  const out = new Uint32Array(Math.ceil(x.length / 2));
  for (let i = 0; i < x.length; i++) out[i >> 1] |= i & 1 ? hi[i] & 0xffff0000 : hi[i] >>> 16;
  return out;
}

/** The signed bytes of int8 wire words, element 4w + j in byte j, n of them. */
export function unpackInt8(words: Uint32Array, n: number): Int32Array {
  return Int32Array.from({ length: n }, (_, i) => (words[i >> 2] << (24 - 8 * (i & 3))) >> 24);
}

/** The signed nibbles of int4 wire words, element 8w + j in nibble j (two's complement), n of them. */
export function unpackInt4(words: Uint32Array, n: number): Int32Array {
  return Int32Array.from({ length: n }, (_, i) => (words[i >> 3] << (28 - 4 * (i & 7))) >> 28);
}

/**
 * Block-wise absmax quantisation to `levels` steps each side of 0: per block of `block` values
 * s = absmax / levels and q = round(levels·x / absmax) ties to even (0 for an all-zero block);
 * dequantised q·s. The last block may be partial.
 */
function blockQuantRef(
  x: Float64Array,
  block: number,
  levels: number,
): { q: Int32Array; scales: Float64Array; y: Float64Array } {
  const blocks = Math.ceil(x.length / block);
  const q = new Int32Array(x.length), scales = new Float64Array(blocks), y = new Float64Array(x.length);
  for (let b = 0; b < blocks; b++) {
    const lo = b * block, hi = Math.min(x.length, lo + block);
    let amax = 0;
    for (let i = lo; i < hi; i++) amax = Math.max(amax, Math.abs(x[i]));
    scales[b] = amax / levels;
    for (let i = lo; i < hi; i++) {
      q[i] = amax > 0 ? roundHalfEven((levels * x[i]) / amax) : 0;
      y[i] = q[i] * scales[b];
    }
  }
  return { q, scales, y };
}

/**
 * Block-wise int8 quantisation: per block of `block` values s = absmax / 127 and
 * q = round(127·x / absmax) ties to even (0 for an all-zero block); dequantised q·s.
 */
export function int8Ref(x: Float64Array, block: number): { q: Int32Array; scales: Float64Array; y: Float64Array } {
  return blockQuantRef(x, block, 127);
}

/**
 * Block-wise int4 quantisation: per block of `block` values s = absmax / 7 and
 * q = round(7·x / absmax) ties to even, in [−7, 7] (0 for an all-zero block); dequantised q·s.
 * q (n), scales (⌈n/block⌉), y (n).
 */
export function int4Ref(x: Float64Array, block: number): { q: Int32Array; scales: Float64Array; y: Float64Array } {
  return blockQuantRef(x, block, 7);
}

/** The signs of sign-compression wire words, n of them: +1 for bit 1, −1 for bit 0. */
export function unpackSigns(words: Uint32Array, n: number): Int32Array {
  return Int32Array.from({ length: n }, (_, i) => ((words[i >> 5] >>> (i & 31)) & 1 ? 1 : -1));
}

/** 1-bit Adam's sign compression: sign = +1 where x ≥ 0, else −1; scale = ‖x‖₂ / √n; y = sign·scale. */
export function signRef(x: Float64Array): { signs: Int32Array; scale: number; y: Float64Array } {
  const signs = Int32Array.from(x, (v) => (v >= 0 ? 1 : -1));
  const scale = Math.sqrt(x.reduce((s, v) => s + v * v, 0) / x.length);
  return { signs, scale, y: Float64Array.from(signs, (s) => s * scale) };
}

/**
 * Top-k by magnitude: the k indices of largest |x|, ties to the lower index, in increasing index
 * order, with their values; y is the dense scatter.
 */
export function topKRef(x: Float64Array, k: number): { indices: Uint32Array; values: Float64Array; y: Float64Array } {
  const order = Array.from(x.keys()).sort((a, b) => Math.abs(x[b]) - Math.abs(x[a]) || a - b);
  const indices = Uint32Array.from(order.slice(0, k)).sort();
  const values = Float64Array.from(indices, (i) => x[i]);
  const y = new Float64Array(x.length);
  indices.forEach((i, j) => (y[i] = values[j]));
  return { indices, values, y };
}

/** Modified Gram–Schmidt, two passes per column, on the columns of p (rows × rank, row-major), in order; a zero column stays 0. */
export function orthogonaliseRef(p: Float64Array, rows: number, rank: number): Float64Array {
  const out = Float64Array.from(p);
  const dot = (a: number, b: number) => {
    let s = 0;
    for (let r = 0; r < rows; r++) s += out[r * rank + a] * out[r * rank + b];
    return s;
  };
  for (let j = 0; j < rank; j++) {
    for (let pass = 0; pass < 2; pass++) {
      for (let i = 0; i < j; i++) {
        const d = dot(i, j);
        for (let r = 0; r < rows; r++) out[r * rank + j] -= d * out[r * rank + i];
      }
    }
    const norm = Math.sqrt(dot(j, j));
    for (let r = 0; r < rows; r++) out[r * rank + j] = norm > 0 ? out[r * rank + j] / norm : 0;
  }
  return out;
}

/**
 * One PowerSGD step on one rank (Vogels et al., Algorithm 1): P = M·Q, P̂ = orthogonalise(P),
 * Q′ = Mᵀ·P̂, D = P̂·Q′ᵀ. M is rows × cols, Q cols × rank, all row-major.
 */
export function powerSgdRef(
  m: Float64Array,
  q: Float64Array,
  rows: number,
  cols: number,
  rank: number,
): { p: Float64Array; q: Float64Array; d: Float64Array } {
  const p = new Float64Array(rows * rank);
  for (let r = 0; r < rows; r++) {
    for (let j = 0; j < rank; j++) {
      let s = 0;
      for (let c = 0; c < cols; c++) s += m[r * cols + c] * q[c * rank + j];
      p[r * rank + j] = s;
    }
  }
  const ph = orthogonaliseRef(p, rows, rank);
  const q2 = new Float64Array(cols * rank);
  for (let c = 0; c < cols; c++) {
    for (let j = 0; j < rank; j++) {
      let s = 0;
      for (let r = 0; r < rows; r++) s += m[r * cols + c] * ph[r * rank + j];
      q2[c * rank + j] = s;
    }
  }
  const d = new Float64Array(rows * cols);
  for (let r = 0; r < rows; r++) {
    for (let c = 0; c < cols; c++) {
      let s = 0;
      for (let j = 0; j < rank; j++) s += ph[r * rank + j] * q2[c * rank + j];
      d[r * cols + c] = s;
    }
  }
  return { p: ph, q: q2, d };
}

/**
 * Error feedback over a sequence of inputs with a compress-then-decompress map `cd`:
 * e ← e + x; d = cd(e); e ← e − d. Returns every step's d and the final residual.
 */
export function errorFeedbackRef(
  inputs: Float64Array[],
  cd: (v: Float64Array) => Float64Array,
): { decoded: Float64Array[]; residual: Float64Array } {
  let e = new Float64Array(inputs[0]?.length ?? 0);
  const decoded = inputs.map((x) => {
    const v = e.map((ei, i) => ei + x[i]);
    const d = cd(v);
    e = v.map((vi, i) => vi - d[i]);
    return d;
  });
  return { decoded, residual: e };
}
