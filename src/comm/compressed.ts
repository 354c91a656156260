/**
 * Compression-assisted collectives (docs/design.md#compressed-collectives-and-the-per-dimension-policy; MCR-DL, arXiv
 * 2303.08374): the same calls as a {@link Communicator}, but each message is compressed on the rank's GPU before it
 * leaves and decompressed on arrival, so the wire (and the trace, which counts what the transport sends) carries
 * payload + scales + indices only.
 *
 * A compressed sum cannot be added up hop by hop, so allReduce runs in two phases, as 1-bit
 * Adam's compressed allReduce does (arXiv 2102.02888, §4.2): the vector is cut into p chunks of
 * c = ⌈n/p⌉ (zero-padded), chunk j of every rank goes to rank j compressed (allToAll), rank j
 * decompresses and reduces its chunk, compresses the result and every rank gathers all of them
 * (allGather). Every rank decodes the same words, so replicas stay equal. reduceScatter is the
 * first phase, allGather the second.
 *
 * Error feedback (top-k, sign; compression.ts needsErrorFeedback) keeps one residual per chunk
 * on both phases, keyed by the call's `name`: gradients recur every step under the same name.
 *
 * With one rank nothing is sent and nothing is compressed. Host arrays in and out: the engine's
 * collectives already run on the host (autograd/collective.ts), and the GPU here does the
 * compression, as it would next to the NIC.
 */
import type { Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { axpy } from '../kernels/elementwise.ts';
import {
  bf16Compressor,
  type Compressed,
  type Compressor,
  ErrorFeedback,
  fp16Compressor,
  int4Compressor,
  int8Compressor,
  packMessage,
  releaseCompressed,
  signCompressor,
  topKCompressor,
  unpackMessage,
} from '../kernels/compress/index.ts';
import type { Communicator } from './communicator.ts';
import { formatScheme, needsErrorFeedback, type Scheme, schemeWords } from './compression.ts';

/**
 * The GPU compressor of an elementwise scheme.
 * @throws Error for none and powersgd, which have none (powersgd: powersgd_allreduce.ts).
 */
export function compressorFor(s: Scheme): Compressor {
  switch (s.kind) {
    case 'fp16':
      return fp16Compressor;
    case 'bf16':
      return bf16Compressor;
    case 'int8':
      return int8Compressor(s.block);
    case 'int4':
      return int4Compressor(s.block);
    case 'topk':
      return topKCompressor({ density: s.density });
    case 'sign':
      return signCompressor;
    default:
      throw new Error(`compressorFor: ${formatScheme(s)} is not an elementwise compressor`);
  }
}

/**
 * The float collectives of one process group that the parallel layer's bulk traffic calls:
 * a plain {@link Communicator} or a {@link CompressedComm}, chosen per parallel dimension by the
 * plan's compression policy (compression.ts).
 */
export interface FloatCollectives {
  readonly size: number;
  readonly rank: number;
  readonly id: string;
  allReduce(x: Float32Array, o?: { op?: 'sum' | 'avg' }): Promise<Float32Array>;
  reduceScatter(x: Float32Array): Promise<Float32Array>;
  allGather(x: Float32Array): Promise<Float32Array>;
  allToAll(x: Float32Array): Promise<Float32Array>;
  send(x: Float32Array, dst: number, o?: { tag?: number }): Promise<void>;
  recv(out: Float32Array, src: number, o?: { tag?: number }): Promise<Float32Array>;
}

/**
 * `comm`'s float collectives under `scheme`: the communicator itself when the scheme is none (or
 * PowerSGD, which only the dp gradient sync applies: powersgd_allreduce.ts), else a
 * {@link CompressedComm} on the rank's GPU.
 */
export function withCompression(comm: Communicator, gpu: Gpu, scheme: Scheme): FloatCollectives {
  return scheme.kind === 'none' || scheme.kind === 'powersgd' ? comm : new CompressedComm(comm, gpu, scheme);
}

/** Options of one compressed call. */
export interface CompressedCallOptions {
  /** Reduction (default sum). */
  op?: 'sum' | 'avg';
  /** Error feedback's key: the same tensor must come back under the same name every step. */
  name?: string;
}

/** A {@link Communicator} whose messages are compressed with one elementwise {@link Scheme}. */
export class CompressedComm implements FloatCollectives {
  readonly compressor: Compressor;
  private readonly feedback: ErrorFeedback | null;

  /**
   * @param errorFeedback keep residuals (default: whether the scheme needs them).
   * @throws Error for a scheme without an elementwise compressor (none, powersgd).
   */
  constructor(readonly comm: Communicator, readonly gpu: Gpu, readonly scheme: Scheme, errorFeedback?: boolean) {
    this.compressor = compressorFor(scheme);
    this.feedback = errorFeedback ?? needsErrorFeedback(scheme) ? new ErrorFeedback(this.compressor) : null;
  }

  get size(): number {
    return this.comm.size;
  }

  get rank(): number {
    return this.comm.rank;
  }

  /** The group's id: the trace keys its compressed calls under it. */
  get id(): string {
    return this.comm.id;
  }

  /**
   * x (n) → the reduction over the group of every rank's x, decoded from compressed chunks
   * (module doc). Sends 2(p−1)·words(⌈n/p⌉) words with direct allToAll and ring allGather.
   * @throws (rejects with) a peer's failure or a call out of step.
   */
  async allReduce(x: Float32Array, o: CompressedCallOptions = {}): Promise<Float32Array> {
    const p = this.comm.size, n = x.length;
    if (p === 1) return x;
    const c = Math.ceil(n / p), padded = new Float32Array(p * c);
    padded.set(x);
    const mine = await this.reduceChunks(padded, c, o);
    const all = await this.gatherChunks(mine, c, o.name && `${o.name}/reduced`);
    return all.subarray(0, n);
  }

  /**
   * x (p·c) → this rank's chunk (c) of the reduction, from compressed chunks (phase 1).
   * @throws Error when x does not split over the group.
   */
  async reduceScatter(x: Float32Array, o: CompressedCallOptions = {}): Promise<Float32Array> {
    const p = this.comm.size;
    if (x.length % p) throw new Error(`compressed reduceScatter: ${x.length} elements do not split over ${p} ranks`);
    if (p === 1) return x;
    const t = await this.reduceChunks(x, x.length / p, o);
    const out = await this.gpu.read(t) as Float32Array;
    t.release();
    return out;
  }

  /** x (c) → every rank's x, decoded, in rank order (p·c); this rank's own chunk is decoded too. */
  async allGather(x: Float32Array, o: { name?: string } = {}): Promise<Float32Array> {
    if (this.comm.size === 1) return x;
    const t = this.gpu.upload(x, [x.length], 'f32', 'compressed.allGather');
    return await this.gatherChunks(t, x.length, o.name);
  }

  /** x (p·c): chunk j goes to rank j compressed; chunk i of the result came from rank i, decoded. */
  async allToAll(x: Float32Array, o: { name?: string } = {}): Promise<Float32Array> {
    const p = this.comm.size;
    if (x.length % p) throw new Error(`compressed allToAll: ${x.length} elements do not split over ${p} ranks`);
    if (p === 1) return x;
    const c = x.length / p;
    const got = await this.comm.allToAll(await this.encode(x, c, o.name));
    const t = this.decodeAll(got, c, 1), out = await this.gpu.read(t) as Float32Array;
    t.release();
    return out;
  }

  /** Sends x compressed to group rank `dst`. */
  async send(x: Float32Array, dst: number, o: { tag?: number; name?: string } = {}): Promise<void> {
    await this.comm.send(await this.encode(x, x.length, o.name), dst, { tag: o.tag });
  }

  /** Receives out.length values sent by {@link send} from group rank `src`, decoded into `out`. */
  async recv(out: Float32Array, src: number, o: { tag?: number; timeoutMs?: number } = {}): Promise<Float32Array> {
    const words = await this.comm.recv(new Int32Array(this.wordsOf(out.length)), src, o);
    const t = this.decodeAll(words, out.length, 1);
    out.set(await this.gpu.read(t) as Float32Array);
    t.release();
    return out;
  }

  /** 4-byte words of one compressed message of n values. */
  wordsOf(n: number): number {
    return schemeWords(this.scheme, n);
  }

  /**
   * The error-feedback residual of chunk `key` (f32), or undefined: `${name}/${j}` for what this
   * rank sent of chunk j, `${name}/reduced/0` for its reduced chunk of an allReduce.
   */
  residual(key: string): Tensor | undefined {
    return this.feedback?.residual(key);
  }

  /**
   * Creates the residuals an allReduce of n values under `name` keeps (none without error
   * feedback), so a checkpoint can restore them before the first call.
   */
  prepareAllReduce(name: string, n: number): void {
    if (!this.feedback || this.comm.size === 1) return;
    const c = Math.ceil(n / this.comm.size);
    for (let j = 0; j < this.comm.size; j++) this.feedback.residualFor(this.gpu, `${name}/${j}`, c);
    this.feedback.residualFor(this.gpu, `${name}/reduced/0`, c);
  }

  /** The residuals a reduceScatter of p chunks of c values under `name` keeps (as {@link prepareAllReduce}). */
  prepareReduceScatter(name: string, c: number): void {
    if (!this.feedback || this.comm.size === 1) return;
    for (let j = 0; j < this.comm.size; j++) this.feedback.residualFor(this.gpu, `${name}/${j}`, c);
  }

  /** The error-feedback residuals by key (see {@link residual}): what a checkpoint must keep. */
  state(): Record<string, Tensor> {
    return Object.fromEntries(this.feedback?.entries() ?? []);
  }

  /** Releases the error-feedback residuals. */
  release(): void {
    this.feedback?.release();
  }

  // ---- internals ----

  /** Phase 1: this rank's chunk of the reduction of x (p·c), on the GPU (c). */
  private async reduceChunks(x: Float32Array, c: number, o: CompressedCallOptions): Promise<Tensor> {
    const got = await this.comm.allToAll(await this.encode(x, c, o.name));
    return this.decodeAll(got, c, o.op === 'avg' ? 1 / this.comm.size : 1, true);
  }

  /** Phase 2: every rank's chunk t (c, released here), compressed, gathered and decoded (p·c). */
  private async gatherChunks(t: Tensor, c: number, name?: string): Promise<Float32Array> {
    const words = await this.encodeChunks([t], name);
    t.release();
    const out = this.decodeAll(await this.comm.allGather(words), c, 1);
    const r = await this.gpu.read(out) as Float32Array;
    out.release();
    return r;
  }

  /** x (k·c) on the host → k compressed messages of c values, back to back in one word array. */
  private async encode(x: Float32Array, c: number, name?: string): Promise<Int32Array> {
    const chunks = Array.from(
      { length: x.length / c },
      (_, j) => this.gpu.upload(x.subarray(j * c, (j + 1) * c), [c], 'f32', 'compressed.in'),
    );
    const words = await this.encodeChunks(chunks, name);
    for (const t of chunks) t.release();
    return words;
  }

  /**
   * Chunks (c values each, on the GPU) → their compressed messages back to back in one word
   * array; chunk j's error feedback is keyed `${name}/${j}`. One message buffer serves every
   * chunk: each is packed before the next compress overwrites it, in command order.
   */
  private async encodeChunks(chunks: Tensor[], name?: string): Promise<Int32Array> {
    const { gpu } = this, c = chunks[0].size, w = this.wordsOf(c);
    const words = gpu.empty([chunks.length * w], 'u32', 'compressed.words');
    const m = this.compressor.allocate(gpu, c);
    chunks.forEach((t, j) => {
      if (this.feedback && name) this.feedback.compress(gpu, `${name}/${j}`, t, m);
      else this.compressor.compress(gpu, t, m);
      packMessage(gpu, m, words, j * w);
    });
    releaseCompressed(m);
    const bytes = chunks.length * c * 4;
    const host = await this.comm.tracer.span('compress', () => gpu.read(words), { bytes, sim: false });
    words.release();
    return new Int32Array(host.buffer, host.byteOffset, host.length);
  }

  /**
   * Words of k = words.length / w messages of c values → their decoded values: back to back (k·c),
   * or with `sum` their sum (c), each scaled by alpha. The caller releases the tensor.
   */
  private decodeAll(words: Int32Array, c: number, alpha: number, sum = false): Tensor {
    const { gpu } = this, w = this.wordsOf(c), k = words.length / w;
    const packed = gpu.upload(new Uint32Array(words.buffer, words.byteOffset, words.length), [words.length], 'u32');
    const out = sum ? gpu.zeros([c], 'f32', 'compressed.sum') : gpu.empty([k * c], 'f32', 'compressed.out');
    const m: Compressed = this.compressor.allocate(gpu, c), y = gpu.empty([c], 'f32', 'compressed.y');
    for (let j = 0; j < k; j++) {
      unpackMessage(gpu, packed, j * w, m);
      this.compressor.decompress(gpu, m, y);
      if (sum) axpy(gpu, alpha, y, out);
      else gpu.copy(y, out.range(j * c, c));
    }
    releaseCompressed(m);
    y.release();
    packed.release();
    return out;
  }
}
