/**
 * Collectives on GPU tensors (docs/design.md#ranks-and-the-collective-layer): each call reads the rank's tensor back to
 * the host, runs the CPU {@link Communicator} collective on the copy, and writes the result into the output tensor —
 * the honest cost of ranks that share no device memory. The read-back and write are traced as `gpu.read` / `gpu.write`
 * compute spans that leave the simulated clock alone (a real system would send from device memory), so simulated time
 * is the network's.
 *
 * Calling convention as in communicator.ts (NCCL's): without `out` a call is in place, with
 * `out` the input tensor is left untouched. Tensors hold f32 or i32 (u32 is refused); shapes
 * are flat element counts — only `size` and `dtype` matter.
 *
 * Usage: `const tc = new TensorComm(world, gpu); await tc.allReduce(grad, { op: 'avg' });`
 */
import type { Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import type { Communicator, NumArray, ReduceOp } from './communicator.ts';
import type { CallOptions } from './call_options.ts';

/** Options of the reducing tensor collectives. */
export interface TensorReduceOptions extends CallOptions {
  /** Default `sum`; `avg` needs f32. */
  op?: ReduceOp;
  /** Output tensor (same dtype; size per call); omitted: in place. */
  out?: Tensor;
}

/** Options of the non-reducing tensor collectives. */
export interface TensorOptions extends CallOptions {
  out?: Tensor;
}

/** A {@link Communicator} bound to the rank's {@link Gpu}, taking {@link Tensor}s. */
export class TensorComm {
  constructor(readonly comm: Communicator, readonly gpu: Gpu) {}

  /** `t` (n elements) → the elementwise reduction over all ranks in `out ?? t`. */
  async allReduce(t: Tensor, opts: TensorReduceOptions = {}): Promise<Tensor> {
    const dst = this.target(t, opts.out, t.size, 'allReduce');
    const host = await this.read(t);
    await this.comm.allReduce(host, { op: opts.op, algorithm: opts.algorithm, timeoutMs: opts.timeoutMs });
    return await this.write(dst, host);
  }

  /**
   * `t` holds size × c elements; rank i gets the reduction of chunk i in `out` (c elements) or,
   * in place, in chunk i of `t` (the rest of `t` is left as it was). In place returns a view of
   * that chunk whose byte offset may not meet the storage-binding alignment: read or write it,
   * do not bind it. @throws Error when t.size is not a multiple of the group size.
   */
  async reduceScatter(t: Tensor, opts: TensorReduceOptions = {}): Promise<Tensor> {
    const p = this.comm.size;
    if (t.size % p) throw new Error(`reduceScatter: tensor of ${t.size} elements does not split over ${p} ranks`);
    const c = t.size / p;
    const dst = opts.out ? this.target(t, opts.out, c, 'reduceScatter') : t.range(this.comm.rank * c, c);
    const host = await this.read(t);
    const mine = await this.comm.reduceScatter(host, {
      op: opts.op,
      algorithm: opts.algorithm,
      timeoutMs: opts.timeoutMs,
    });
    return await this.write(dst, mine);
  }

  /**
   * Every rank's `t` (c elements) lands at chunk i of `out` (size × c elements; allocated from
   * the pool when omitted — the caller releases it). `t` may alias chunk `rank` of `out`.
   */
  async allGather(t: Tensor, opts: TensorOptions = {}): Promise<Tensor> {
    const n = t.size * this.comm.size;
    const dst = opts.out ? this.target(t, opts.out, n, 'allGather') : this.gpu.empty([n], t.dtype, 'allGather out');
    const res = await this.comm.allGather(await this.read(t), { algorithm: opts.algorithm, timeoutMs: opts.timeoutMs });
    return await this.write(dst, res);
  }

  /** Root's `t` reaches every rank's `out ?? t` (non-roots do not read their input). */
  async broadcast(t: Tensor, root: number, opts: TensorOptions = {}): Promise<Tensor> {
    const dst = this.target(t, opts.out, t.size, 'broadcast');
    const host = this.comm.rank === root ? await this.read(t) : hostArray(t, t.size);
    await this.comm.broadcast(host, root, { algorithm: opts.algorithm, timeoutMs: opts.timeoutMs });
    return await this.write(dst, host);
  }

  /** The reduction of every rank's `t` lands in root's `out ?? t`; other ranks' tensors are untouched. */
  async reduce(t: Tensor, root: number, opts: TensorReduceOptions = {}): Promise<Tensor> {
    const dst = this.target(t, opts.out, t.size, 'reduce');
    const host = await this.read(t);
    await this.comm.reduce(host, root, { op: opts.op, algorithm: opts.algorithm, timeoutMs: opts.timeoutMs });
    return this.comm.rank === root ? await this.write(dst, host) : dst;
  }

  /** Chunk j of `t` (size × c elements) goes to rank j; chunk i of `out ?? t` came from rank i. */
  async allToAll(t: Tensor, opts: TensorOptions = {}): Promise<Tensor> {
    const dst = this.target(t, opts.out, t.size, 'allToAll');
    const host = await this.read(t);
    await this.comm.allToAll(host, { algorithm: opts.algorithm, timeoutMs: opts.timeoutMs });
    return await this.write(dst, host);
  }

  /** Sends `t`'s values to group rank `dst` (buffered, as {@link Communicator.send}). */
  async send(t: Tensor, dst: number, opts: { tag?: number } = {}): Promise<void> {
    await this.comm.send(await this.read(t), dst, opts);
  }

  /** Receives from group rank `src` into `t` (dtype and size must match the send). */
  async recv(t: Tensor, src: number, opts: { tag?: number; timeoutMs?: number } = {}): Promise<Tensor> {
    return await this.write(t, await this.comm.recv(hostArray(t, t.size), src, opts));
  }

  // ---- internals ----

  private target(t: Tensor, out: Tensor | undefined, n: number, what: string): Tensor {
    hostArray(t, 0);
    const dst = out ?? t;
    if (dst.dtype !== t.dtype) throw new Error(`${what}: out is ${dst.dtype} but the input is ${t.dtype}`);
    if (dst.size !== n) throw new Error(`${what}: out has ${dst.size} elements, needs ${n}`);
    return dst;
  }

  private read(t: Tensor): Promise<NumArray> {
    return this.comm.tracer.span('gpu.read', async () => {
      const a = await this.gpu.read(t);
      // gpu.read hands back a fresh copy: the collective may work on it in place.
      return a as NumArray;
    }, { bytes: t.bytes, sim: false });
  }

  private write(t: Tensor, data: NumArray): Promise<Tensor> {
    return this.comm.tracer.span('gpu.write', () => {
      if (t.size) this.gpu.write(t, data);
      return t;
    }, { bytes: t.bytes, sim: false });
  }
}

/** A zeroed host array of `t`'s dtype. @throws Error for dtypes the wire does not carry (u32). */
function hostArray(t: Tensor, n: number): NumArray {
  if (t.dtype === 'f32') return new Float32Array(n);
  if (t.dtype === 'i32') return new Int32Array(n);
  throw new Error(`collectives take f32 or i32 tensors, got ${t.dtype} (tensor ${t.label || t.id} [${t.shape}])`);
}
