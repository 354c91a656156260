/**
 * ZeRO stage 1 (Rajbhandari et al., arXiv 1910.02054, P_os; Megatron's distributed optimizer)
 * for the mesh trainer: the optimizer state and update of a rank's (pp, tp) shard are split over
 * its dp·cp group. zero.ts does the same for a whole-model replica with overlapped buckets; here
 * the shard arrives whole after the pipeline schedule, so there is one call of each collective.
 *
 * Pieces: the ParamStore's flat buffer of F elements (each parameter 256-byte aligned) is cut
 * into d pieces of c = ⌈F / (64·d)⌉·64 elements, so every piece ∩ parameter starts 256-byte
 * aligned and can be bound; rank r owns flat elements [r·c, min((r+1)·c, F)). The alignment
 * gaps travel with the data (zeros), so the calls are on d·c elements:
 * - reduce-scatter (avg) of the local gradient, padded to d·c → this rank's reduced piece;
 * - AdamW on the piece only (the store's m, v hold the piece's state; the rest stays unused —
 *   the ParamStore has no sharded mode, as zero.ts notes);
 * - all-gather of the updated pieces → every rank's full shard values.
 * Ring elements sent per step: (d−1)·c for each of the two calls.
 */
import type { Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import type { Communicator } from '../comm/communicator.ts';
import type { ParamStore } from '../nn/params.ts';
import { sliceOf } from './buckets.ts';
import { subGroup } from './data_parallel.ts';

/** One (piece ∩ parameter) update: views of the store's buffers over the same flat range. */
interface Update {
  name: string;
  decay: boolean;
  value: Tensor;
  grad: Tensor;
  m: Tensor;
  v: Tensor;
}

/** ZeRO-1 over `group` (the dp·cp ranks holding the same shard) for one ParamStore. */
export class MeshZero1 {
  /** Piece length c (a multiple of 64 elements). */
  readonly c: number;
  /** This rank's flat range [lo, hi). */
  readonly lo: number;
  readonly hi: number;
  /** Flat length F of the store's buffers. */
  readonly flat: number;
  /** AdamW's slots (optimizer.ts): this rank's piece of every parameter it meets. */
  readonly slots: Update[] = [];
  private readonly grads: Communicator;
  private readonly params: Communicator;

  /** @param group the gradient-sync group; its rank picks the piece. */
  constructor(readonly gpu: Gpu, readonly store: ParamStore, group: Communicator) {
    const d = group.size, F = this.flat = store.grads.size;
    this.c = Math.ceil(F / (64 * d)) * 64;
    this.lo = Math.min(F, group.rank * this.c);
    this.hi = Math.min(F, (group.rank + 1) * this.c);
    for (const p of store.params) {
      const a = Math.max(p.offset, this.lo), b = Math.min(p.offset + p.size, this.hi);
      if (a >= b) continue;
      const view = (t: Tensor) => sliceOf(t, a, b, `${p.name}[${a - p.offset}:${b - p.offset}]`);
      this.slots.push({
        name: p.name,
        decay: p.decay,
        value: view(store.values),
        grad: view(store.grads),
        m: view(store.m),
        v: view(store.v),
      });
    }
    this.grads = subGroup(group, 'grads');
    this.params = subGroup(group, 'params');
  }

  /**
   * Reduce-scatters (avg) the local flat gradient `flat` (F elements, host) and writes this
   * rank's reduced piece into the store's gradient. Returns the piece (hi − lo elements).
   */
  async reduceScatter(flat: Float32Array): Promise<Float32Array> {
    const padded = new Float32Array(this.c * this.grads.size);
    padded.set(flat);
    const piece = (await this.grads.reduceScatter(padded, { op: 'avg' })).slice(0, this.hi - this.lo);
    if (piece.length) this.gpu.write(sliceOf(this.store.grads, this.lo, this.hi), piece);
    return piece;
  }

  /** Σ g² over the piece's elements of the parameters `counts` selects. */
  squaredNorm(piece: Float32Array, counts: (name: string) => boolean): number {
    let s = 0;
    for (const p of this.store.params) {
      if (!counts(p.name)) continue;
      const a = Math.max(p.offset, this.lo), b = Math.min(p.offset + p.size, this.hi);
      for (let i = a; i < b; i++) s += piece[i - this.lo] ** 2;
    }
    return s;
  }

  /** All-gathers the updated pieces into every rank's full value buffer. */
  async allGather(): Promise<void> {
    const mine = new Float32Array(this.c);
    if (this.hi > this.lo) {
      mine.set((await this.gpu.read(sliceOf(this.store.values, this.lo, this.hi))) as Float32Array);
    }
    const all = await this.params.allGather(mine);
    this.gpu.write(this.store.values, all.subarray(0, this.flat));
  }
}
