/**
 * The pieces of one ZeRO rank (zero_sync.ts): where each bucket is cut, the shard buffers that
 * hold this rank's pieces, the AdamW views over them, the all-gathers that rebuild whole buckets
 * from every rank's pieces, and the model-state bytes the rank holds. zero_sync.ts decides when
 * to reduce, gather and update; this module is the layout and state those calls act on, the
 * same at every stage.
 *
 * Sharding. Every bucket k of the flat buffers (whole parameters, buckets.ts) of n_k elements
 * is split into d pieces of c_k = ⌈n_k / (64·d)⌉·64 elements (256-byte aligned so a piece can be
 * bound); rank r owns elements [start_k + r·c_k, start_k + min((r+1)·c_k, n_k)) of every bucket,
 * as FSDP shards each flat parameter. Its optimizer state (AdamW m, v) and reduced gradient live
 * in shard buffers of Σ_k c_k elements; AdamW runs once per (piece ∩ parameter) so each
 * parameter keeps its own weight decay (matrices only, as the single-rank run).
 */
import type { Gpu } from '../../gpu/context.ts';
import type { Tensor } from '../../gpu/tensor.ts';
import type { AdamWSlot } from '../../train/optimizer.ts';
import type { Communicator } from '../../comm/communicator.ts';
import { type ParamStore, storageTensor } from '../../nn/params.ts';
import { type Bucket, sliceOf } from '../data/buckets.ts';

/** Rank r's piece of bucket k: flat elements [lo, hi), at shard offset `at`, c elements reserved. */
export interface Piece {
  bucket: Bucket;
  c: number;
  at: number;
  lo: number;
  hi: number;
}

/**
 * This rank's pieces of `buckets`, each split over the ranks that hold it (`groupOf(b)`: this
 * rank's index and the group's size; the dp·cp group, or an expert's expert-data-parallel group),
 * and the shard length Σ c_k.
 */
export function planPieces(
  buckets: Bucket[],
  groupOf: (b: Bucket) => { rank: number; size: number },
): { pieces: Piece[]; shard: number } {
  let at = 0;
  const pieces = buckets.map((b) => {
    const { rank, size } = groupOf(b), n = b.end - b.start, c = Math.ceil(n / (64 * size)) * 64;
    const p = {
      bucket: b,
      c,
      at,
      lo: Math.min(b.start + rank * c, b.end),
      hi: Math.min(b.start + (rank + 1) * c, b.end),
    };
    at += c;
    return p;
  });
  return { pieces, shard: at };
}

/** Bytes of GPU memory one rank holds for model state (fp32), measured from its buffers. */
export interface ZeroMemory {
  /** Values: the flat buffer (stages 1–2) or the shard plus the working buffers (stage 3). */
  params: number;
  /** Gradients: the flat buffer (stage 1) or the reduced shard plus the working buffers. */
  grads: number;
  /** AdamW m and v of this rank's pieces. */
  optimizer: number;
  /** Of params and grads, the bytes of zero_units.ts's working buffers (resident units + one layer). */
  working: number;
}

/**
 * One rank's pieces and the buffers that hold them: AdamW m and v always, the reduced gradient
 * when gradients are sharded (stages 2–3), the values when they are (stage 3); otherwise the
 * store's flat buffers hold the rank's ranges. `gHost` is the host copy of the reduced gradient.
 */
export class ZeroShards {
  readonly pieces: Piece[];
  /** Shard length Σ c_k. */
  readonly shard: number;
  readonly m: Tensor;
  readonly v: Tensor;
  /** Sharded gradients: the reduced gradient pieces. */
  readonly g: Tensor | null;
  /** Sharded values: the value pieces, which AdamW updates in place. */
  readonly values: Tensor | null;
  /** This step's reduced gradient pieces on the host, in the shard layout. */
  readonly gHost: Float32Array;
  /** One AdamW slot per (piece ∩ parameter) range. */
  private readonly updates: AdamWSlot[] = [];

  /**
   * Allocates this rank's shard buffers, each bucket split over `groupOf(b)`'s ranks; with sharded
   * values, copies its pieces of the store's flat values (which every rank built from the same
   * seed) on the GPU, so the caller may free the flat buffer right after (a queued copy runs
   * before a later destroy).
   */
  constructor(
    readonly gpu: Gpu,
    readonly store: ParamStore,
    buckets: Bucket[],
    groupOf: (b: Bucket) => { rank: number; size: number },
    sharded: { grads: boolean; values: boolean },
  ) {
    const { pieces, shard: at } = planPieces(buckets, groupOf);
    this.pieces = pieces;
    this.shard = at;
    const buffer = (what: string) => storageTensor(gpu, at, `zero.${what}`);
    this.m = buffer('m');
    this.v = buffer('v');
    this.g = sharded.grads ? buffer('grad') : null;
    this.values = sharded.values ? buffer('values') : null;
    this.gHost = new Float32Array(at);
    for (const pc of this.pieces) {
      for (const p of pc.bucket.params) {
        const lo = Math.max(p.offset, pc.lo), hi = Math.min(p.offset + p.size, pc.hi);
        if (hi <= lo) continue;
        const s = pc.at + lo - pc.lo, mine = (t: Tensor) => sliceOf(t, s, s + hi - lo, p.name);
        this.updates.push({
          value: this.values ? mine(this.values) : sliceOf(store.values, lo, hi, p.name),
          grad: this.g ? mine(this.g) : sliceOf(store.grads, lo, hi),
          m: mine(this.m),
          v: mine(this.v),
          decay: p.decay,
        });
      }
    }
    if (this.values) {
      for (const pc of this.pieces) {
        if (pc.hi > pc.lo) {
          gpu.copy(sliceOf(store.values, pc.lo, pc.hi), sliceOf(this.values, pc.at, pc.at + pc.hi - pc.lo));
        }
      }
    }
  }

  /** Writes `gHost` where AdamW reads it; returns every (piece ∩ parameter) for optimizer.ts's AdamW. */
  slots(): readonly AdamWSlot[] {
    const { gpu } = this;
    if (this.g) {
      if (this.shard) gpu.write(this.g, this.gHost);
    } else {
      // Stage 1: the reduced pieces go back into the rank's own ranges of the full gradient buffer.
      for (const pc of this.pieces) {
        if (pc.hi > pc.lo) {
          gpu.write(sliceOf(this.store.grads, pc.lo, pc.hi), this.gHost.subarray(pc.at, pc.at + pc.hi - pc.lo));
        }
      }
    }
    return this.updates;
  }

  /** Host copies of this rank's value pieces, each padded to c_k (from the shard at stage 3). */
  async readOwn(): Promise<Float32Array[]> {
    if (this.values) {
      const shard = await this.gpu.read(this.values) as Float32Array;
      return this.pieces.map((pc) => shard.slice(pc.at, pc.at + pc.c));
    }
    const flat = await this.gpu.read(this.store.values) as Float32Array;
    return this.pieces.map((pc) => {
      const out = new Float32Array(pc.c); // the tail past hi stays zero padding
      out.set(flat.subarray(pc.lo, pc.hi));
      return out;
    });
  }

  /**
   * Σ g² over this step's reduced pieces of the parameters `counts` selects (all by default;
   * a tensor-parallel shard leaves replicated parameters to tp index 0).
   */
  squaredNorm(counts: (name: string) => boolean = () => true): number {
    let s = 0;
    for (const pc of this.pieces) {
      for (const p of pc.bucket.params) {
        const lo = Math.max(p.offset, pc.lo), hi = Math.min(p.offset + p.size, pc.hi);
        if (hi <= lo || !counts(p.name)) continue;
        for (let i = pc.at + lo - pc.lo; i < pc.at + hi - pc.lo; i++) s += this.gHost[i] * this.gHost[i];
      }
    }
    return s;
  }

  /**
   * Sums this rank's reduced pieces of the buckets holding `names` over `group` (one allReduce
   * of Σ c_k elements): a parameter set every member of `group` holds whole in units of the same
   * lengths — the tied embedding's copies on the first and last stage, the hybrid's shared block
   * on every stage (declared in the same order everywhere) — so the same rank of each dp·cp group
   * holds the same elements of every copy, and the piecewise sum is the sum of the copies.
   * @throws Error when such a bucket also holds a parameter outside `names` (it must be its own unit).
   */
  async sumPieces(names: readonly string[], group: Communicator): Promise<void> {
    const pcs = this.pieces.filter((p) => p.bucket.params.some((q) => names.includes(q.name)));
    const other = pcs.flatMap((pc) => pc.bucket.params).find((q) => !names.includes(q.name));
    if (other) {
      throw new Error(
        `ZeRO: '${other.name}' shares a bucket with ${
          names.join(', ')
        }; those can only be summed in units of their own`,
      );
    }
    const g = this.gHost, packed = new Float32Array(pcs.reduce((a, pc) => a + pc.c, 0));
    pcs.reduce((off, pc) => (packed.set(g.subarray(pc.at, pc.at + pc.c), off), off + pc.c), 0);
    const sum = await group.allReduce(packed, { op: 'sum' });
    pcs.reduce((off, pc) => (g.set(sum.subarray(off, off + pc.c), pc.at), off + pc.c), 0);
  }

  /** Elements of one {@link sumPieces} call over the buckets holding `names`: Σ c_k (for stepTraffic). */
  piecesOf(names: readonly string[]): number {
    const pcs = this.pieces.filter((p) => p.bucket.params.some((q) => names.includes(q.name)));
    return pcs.reduce((a, pc) => a + pc.c, 0);
  }

  /** This step's reduced gradient pieces (c_k each, views of `gHost`). */
  gradPieces(): Float32Array[] {
    return this.pieces.map((pc) => this.gHost.subarray(pc.at, pc.at + pc.c));
  }

  /**
   * Bucket k gathered over `group` (null: the rank holds it alone) from every rank's piece
   * `pieces[k]` (c_k each): its n_k values.
   */
  async gather(group: Communicator | null, pieces: readonly Float32Array[], k: number): Promise<Float32Array> {
    const full = group ? await group.allGather(pieces[k]) : pieces[k];
    const b = this.pieces[k].bucket;
    return full.subarray(0, b.end - b.start);
  }

  /** Every bucket gathered, bucket k over `groupOf(k)` (one all-gather each, in order). */
  async gatherAll(
    groupOf: (k: number) => Communicator | null,
    pieces: readonly Float32Array[],
  ): Promise<Float32Array[]> {
    const out: Float32Array[] = [];
    for (let k = 0; k < this.pieces.length; k++) out.push(await this.gather(groupOf(k), pieces, k));
    return out;
  }

  /** Every bucket gathered into the flat layout (Ψ_flat elements; alignment gaps zero). */
  async gatherFlat(
    groupOf: (k: number) => Communicator | null,
    pieces: readonly Float32Array[],
  ): Promise<Float32Array> {
    const out = new Float32Array(this.store.flatSize);
    for (const { bucket: b } of this.pieces) out.set(await this.gather(groupOf(b.index), pieces, b.index), b.start);
    return out;
  }

  /**
   * Model-state bytes this rank holds now: the store's remaining flat buffers and these shards;
   * `working` is the bytes of zero_units.ts's working buffers (none at stage 1).
   */
  memory(working: { params: number; grads: number }): ZeroMemory {
    const held = this.store.allocatedBytes();
    return {
      params: held.value + (this.values?.bytes ?? 0),
      grads: held.grad + (this.g?.bytes ?? 0),
      optimizer: held.m + held.v + this.m.bytes + this.v.bytes,
      working: working.params + working.grads,
    };
  }

  /** Frees the shard buffers. */
  destroy(): void {
    // Work still being encoded may use the shards (the last AdamW update, a copy): a submit after
    // their destroy is a validation error, so it goes to the queue first.
    this.gpu.flush();
    for (const t of [this.m, this.v, this.g, this.values]) t?.buffer.destroy();
  }
}
