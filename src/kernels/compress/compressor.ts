/**
 * The common shape of the gradient/activation compressors (issue 14): a compressor turns n f32
 * values into a few wire tensors (payload, scales, indices) and back, all on the GPU, and
 * {@link ErrorFeedback} keeps, per named tensor, the residual of what compression dropped so it
 * is sent later instead of lost (Seide et al. 2014; Karimireddy et al., arXiv 1901.09847;
 * 1-bit Adam, arXiv 2102.02888).
 */
import type { Gpu } from '../../gpu/context.ts';
import { type DType, Tensor } from '../../gpu/tensor.ts';
import { axpy } from '../elementwise.ts';

/** One compressed message of `n` values: the wire tensors, in the order each scheme documents. */
export interface Compressed {
  readonly n: number;
  readonly parts: readonly Tensor[];
}

/** A compression scheme for flat f32 tensors (any shape, read as n values). */
export interface Compressor {
  /** The scheme and its parameter, e.g. 'int8:256' or 'topk:0.01'. */
  readonly name: string;
  /**
   * Pooled wire tensors for a message of n values (release with {@link releaseCompressed}).
   * @throws Error when n is not a positive integer or the scheme cannot hold n values.
   */
  allocate(gpu: Gpu, n: number): Compressed;
  /** c = C(x). @throws Error when c was allocated for another size than x, or x is not f32. */
  compress(gpu: Gpu, x: Tensor, c: Compressed): void;
  /** y = D(c), y (n) f32. @throws Error on a size or dtype mismatch. */
  decompress(gpu: Gpu, c: Compressed, y: Tensor): void;
  /** Bytes on the wire for n values: payload + scales + indices, as stored (4-byte words). */
  wireBytes(n: number): number;
}

/** Hands a message's tensors back to the pool. */
export function releaseCompressed(c: Compressed): void {
  for (const t of c.parts) t.release();
}

/** Sum of the stored bytes of a message's tensors: what a collective moves for it. */
export function compressedBytes(c: Compressed): number {
  return c.parts.reduce((s, t) => s + t.wordBytes, 0);
}

/** Throws unless n is a positive integer. */
export function checkCount(fn: string, n: number): void {
  if (!Number.isInteger(n) || n < 1) throw new Error(`${fn}: n must be a positive integer, got ${n}`);
}

/** Throws unless `t` is of `dtype` and holds `size` elements, naming the function and the tensor. */
export function checkTensor(fn: string, name: string, t: Tensor, dtype: DType, size: number): void {
  if (t.dtype !== dtype || t.size !== size) {
    throw new Error(`${fn}: ${name} must be ${dtype} of ${size} elements, got ${t.dtype} [${t.shape}] (${t.size})`);
  }
}

/**
 * Checks a message against the parts a scheme expects: [dtype, size] per part, in order.
 * @throws Error naming the scheme, the part and both layouts.
 */
export function checkParts(fn: string, c: Compressed, want: readonly [string, DType, number][]): void {
  if (c.parts.length !== want.length) {
    throw new Error(`${fn}: expects ${want.length} parts (${want.map((w) => w[0]).join(', ')}), got ${c.parts.length}`);
  }
  want.forEach(([name, dtype, size], i) => checkTensor(fn, name, c.parts[i], dtype, size));
}

/**
 * Error feedback around any {@link Compressor}, one residual e (n, f32, starting at 0) per
 * named tensor: e ← e + x; c = C(e); e ← e − D(c). What compression drops stays in e and is
 * sent with a later step, so Σ_steps D(c) + e = Σ_steps x (up to f32 rounding).
 */
export class ErrorFeedback {
  private readonly residuals = new Map<string, Tensor>();

  constructor(readonly compressor: Compressor) {}

  /**
   * Compresses x (n) with its residual into c and updates the residual. `decoded` (n, f32), when
   * given, receives D(c), the values the receiver will see; otherwise a pooled temporary does.
   * @throws Error when `name` was used with another size, or on the compressor's own checks.
   */
  compress(gpu: Gpu, name: string, x: Tensor, c: Compressed, decoded?: Tensor): void {
    const e = this.residualFor(gpu, name, x.size);
    axpy(gpu, 1, x, e);
    this.compressor.compress(gpu, e, c);
    const d = decoded ?? gpu.empty([x.size], 'f32', 'ef.decoded');
    this.compressor.decompress(gpu, c, d);
    axpy(gpu, -1, d, e);
    if (!decoded) d.release(); // safe at once: later users of the buffer are encoded after
  }

  /**
   * The residual of `name` (n, f32), created at zero on first use: a checkpoint restores into it
   * before the first step.
   * @throws Error when `name` was used with another size.
   */
  residualFor(gpu: Gpu, name: string, n: number): Tensor {
    let e = this.residuals.get(name);
    if (e && e.size !== n) throw new Error(`ErrorFeedback: tensor '${name}' had ${e.size} elements, now ${n}`);
    if (!e) {
      e = gpu.zeros([n], 'f32', `ef.${name}`);
      this.residuals.set(name, e);
    }
    return e;
  }

  /** Every residual by name, for checkpoints. */
  entries(): [string, Tensor][] {
    return [...this.residuals];
  }

  /** The residual of `name` (n, f32), or undefined before its first step. */
  residual(name: string): Tensor | undefined {
    return this.residuals.get(name);
  }

  /** Releases every residual. */
  release(): void {
    for (const e of this.residuals.values()) e.release();
    this.residuals.clear();
  }
}

/** A u32 view of `t`'s stored words (an f16 part's halves two to a word), for buffer copies. */
function wordView(t: Tensor): Tensor {
  return new Tensor(t.gpu, t.buffer, [t.wordBytes / 4], 'u32', t.offset, false, t.label);
}

/** 4-byte words of a message's parts, back to back: what {@link packMessage} writes. */
export function messageWords(c: Compressed): number {
  return compressedBytes(c) / 4;
}

/**
 * Encodes copies of a message's parts, back to back in whole words, into `words` (u32) from word
 * `at`: one buffer holds several messages, so a collective reads them back at once.
 * @throws Error when `words` is not u32 or the message does not fit from `at`.
 */
export function packMessage(gpu: Gpu, c: Compressed, words: Tensor, at: number): void {
  moveParts(gpu, c, words, at, true);
}

/** The inverse of {@link packMessage}: the message's parts from `words` at word `at`. */
export function unpackMessage(gpu: Gpu, words: Tensor, at: number, c: Compressed): void {
  moveParts(gpu, c, words, at, false);
}

function moveParts(gpu: Gpu, c: Compressed, words: Tensor, at: number, pack: boolean): void {
  if (words.dtype !== 'u32' || at + messageWords(c) > words.size) {
    throw new Error(
      `${pack ? 'packMessage' : 'unpackMessage'}: a message of ${
        messageWords(c)
      } words from word ${at} does not fit ${words.dtype} [${words.size}] (u32 needed)`,
    );
  }
  let off = at;
  for (const part of c.parts) {
    const v = wordView(part), n = v.size;
    const slot = words.range(off, n);
    if (pack) gpu.copy(v, slot);
    else gpu.copy(slot, v);
    off += n;
  }
}
