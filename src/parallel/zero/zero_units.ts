/**
 * The working memory of ZeRO-2/3: where a layer's gathered weights and its not-yet-reduced
 * gradients live while it computes (ZeRO, Rajbhandari et al. arXiv 1910.02054 §5 "constant
 * buffers"; PyTorch FSDP's flat-parameter units, Zhao et al. arXiv 2304.11277 §3).
 *
 * Units are the 'layer' buckets of buckets.ts. A unit inside the repeated stack (layerOf names
 * it) is *rotating*: its values and gradients live in one layer-sized working slot that the
 * next layer reuses. Every other unit (embeddings, final norm, a block shared by several
 * layers) is *resident*: FSDP's root unit, kept for the whole micro-batch because the model
 * reads it at both ends (the tied wte) or more than once. Per rank that is
 * W = R + S elements (R resident, S the largest layer) beside the 1/d shards, instead of Ψ.
 *
 * One slot suffices here where a CUDA implementation uses two: a gathered layer is written with
 * `queue.writeBuffer` after the kernels of the layer before it were submitted (Gpu.write
 * flushes first), and the WebGPU queue runs them in that order, so the host may receive layer
 * i−1's weights while the GPU still computes layer i and no second buffer is needed for the
 * overlap. The same order makes reusing a gradient slot safe once its bucket's readback was
 * encoded.
 */
import type { Gpu } from '../../gpu/context.ts';
import { Tensor } from '../../gpu/tensor.ts';
import { type Param, type ParamStore, storageTensor } from '../../nn/params.ts';
import { type Bucket, layerOf, sliceOf } from '../data/buckets.ts';

/** A field's working buffers: the resident units side by side, and the one-layer slot. */
interface Home {
  root: Tensor;
  slot: Tensor;
}

/** Where each unit lives and which unit occupies the working slot. */
export class LayerUnits {
  /** Per unit: true when it stays resident for the whole micro-batch. */
  readonly resident: boolean[];
  private readonly base: number[] = [];
  private readonly unitOf = new Map<Param, number>();
  private readonly homes: { value: Home | null; grad: Home };
  /** Per field: the block whose units occupy the slot, and which of them were written / opened. */
  private readonly inSlot: Record<'value' | 'grad', { block: number; units: Set<number> }> = {
    value: { block: -1, units: new Set() },
    grad: { block: -1, units: new Set() },
  };
  /** Per unit: its block (NaN for a resident unit). */
  private readonly blockOf: number[] = [];
  private pending: (Float32Array | null)[] = [];
  /** Set by {@link withAll}: every unit stays on the host (evaluation reads each layer once per batch). */
  private keepAll = false;
  /** Block index → its rotating units (one 'layer' unit; with ep, its dense and expert runs, zero_sync.ts). */
  private readonly blockUnits = new Map<number, number[]>();
  private readonly opened = new Set<number>();
  private readonly launched = new Set<number>();

  /**
   * Allocates the working buffers and moves the store's gradients (and with `values`, its
   * values) into them; the flat buffers are freed.
   * @throws Error when a unit mixes parameters of the stack with others (buckets must be 'layer' buckets).
   */
  constructor(readonly gpu: Gpu, readonly store: ParamStore, readonly buckets: readonly Bucket[], values: boolean) {
    let root = 0, slot = 0;
    const fill = new Map<number, number>();
    this.resident = buckets.map((b) => {
      const layers = new Set(b.params.map((p) => layerOf(p.name)));
      if (layers.size > 1) {
        throw new Error(
          `ZeRO units: bucket ${b.index} holds parameters of several blocks (${
            [...layers].join(', ')
          }); ZeRO-2/3 need 'layer' buckets`,
        );
      }
      const n = b.end - b.start, resident = layers.has(null);
      const block = resident ? NaN : Number(/\.(\d+)$/.exec([...layers][0]!)?.[1]);
      if (!resident) this.blockUnits.set(block, [...this.blockUnits.get(block) ?? [], b.index]);
      this.blockOf.push(block);
      // A block's units lie side by side in the slot (each n_k a whole number of 256-byte pieces).
      const at = resident ? root : fill.get(block) ?? 0;
      this.base.push(at);
      if (resident) root += n;
      else {
        fill.set(block, at + n);
        slot = Math.max(slot, at + n);
      }
      b.params.forEach((p) => this.unitOf.set(p, b.index));
      return resident;
    });
    // Resident elements R side by side in the root, the largest block's units S sizing the slot.
    const make = (what: string) => ({
      root: storageTensor(gpu, root, `zero.${what}.root`),
      slot: storageTensor(gpu, slot, `zero.${what}.slot`),
    });
    this.homes = { value: values ? make('values') : null, grad: make('grads') };
    const why = 'ZeRO keeps them per layer in working buffers (zero_units.ts)';
    if (values) {
      store.rehome(
        'value',
        (p) => this.viewOf(p, 'value'),
        [this.homes.value!.root, this.homes.value!.slot],
        why,
      );
    }
    store.rehome('grad', (p) => this.viewOf(p, 'grad'), [this.homes.grad.root, this.homes.grad.slot], why);
    if (values) store.onAccess = (p) => this.touch(this.unitOf.get(p)!);
  }

  /** Bytes of the working buffers: W = R + S elements for gradients, and for values at stage 3. */
  workingBytes(): { params: number; grads: number } {
    const w = (h: Home | null) => (h ? h.root.bytes + h.slot.bytes : 0);
    return { params: w(this.homes.value), grads: w(this.homes.grad) };
  }

  /** Unit k's region of its values or gradients home, (end − start) elements. */
  regionOf(k: number, field: 'value' | 'grad'): Tensor {
    const h = this.homes[field];
    if (!h) throw new Error(`ZeRO units: values are not sharded at this stage`);
    const b = this.buckets[k], n = b.end - b.start;
    return sliceOf(this.resident[k] ? h.root : h.slot, this.base[k], this.base[k] + n);
  }

  private viewOf(p: Param, field: 'value' | 'grad'): Tensor {
    const k = this.unitOf.get(p)!, region = this.regionOf(k, field);
    return new Tensor(
      this.gpu,
      region.buffer,
      p.shape,
      'f32',
      region.offset + (p.offset - this.buckets[k].start) * 4,
      false,
      `${field === 'grad' ? 'grad.' : ''}${p.name}`,
    );
  }

  /**
   * Forward of one training micro-batch's stage, one gathered layer at a time: the resident
   * units of `residents` are gathered (`gather(k)`: unit k's values, elements [start, end) of the
   * flat layout) and written now — any other this stage reads was written by an earlier stage of
   * the micro-batch (an interleaved rank) and the root keeps it, values being fixed in a step;
   * each block's units are gathered when the forward reaches the block (the `beforeBlock` hook `run` hands to the model, ForwardOptions) and written into the slot when
   * the model first asks the store for one of its weights (ParamStore.onAccess). The host then
   * holds one layer's gathered values at a time, as the device does.
   */
  async forward<T>(
    gather: (k: number) => Promise<Float32Array>,
    residents: ReadonlySet<number>,
    run: (beforeBlock: (i: number) => Promise<void>) => Promise<T>,
  ): Promise<T> {
    this.pending = this.buckets.map(() => null);
    this.leave('value');
    for (const [k, resident] of this.resident.entries()) {
      if (resident && residents.has(k)) this.gpu.write(this.regionOf(k, 'value'), await gather(k));
    }
    try {
      return await run(async (i) => {
        for (const k of this.blockUnits.get(i) ?? []) this.pending[k] = await gather(k);
      });
    } finally {
      this.pending = [];
    }
  }

  /**
   * A pass (evaluation) with every unit's values already gathered on the host (`full[k]`):
   * resident units are written now, each rotating unit at its first weight read.
   */
  async withAll<T>(full: readonly Float32Array[], run: () => Promise<T>): Promise<T> {
    this.pending = [...full];
    this.leave('value');
    this.keepAll = true;
    this.resident.forEach((r, k) => r && this.gpu.write(this.regionOf(k, 'value'), full[k]));
    try {
      return await run();
    } finally {
      this.pending = [];
      this.keepAll = false;
    }
  }

  /** Empties the slot of `field` (nothing in it is current any more). */
  private leave(field: 'value' | 'grad'): void {
    this.inSlot[field].block = -1;
    this.inSlot[field].units.clear();
  }

  /** Marks unit k current in the slot of `field`; a unit of another block overwrites the previous block's. */
  private enter(field: 'value' | 'grad', k: number): void {
    const at = this.inSlot[field];
    if (at.block !== this.blockOf[k]) this.leave(field);
    at.block = this.blockOf[k];
    at.units.add(k);
  }

  private touch(k: number): void {
    if (this.resident[k] || this.inSlot.value.units.has(k)) return;
    const host = this.pending[k];
    if (!host) {
      throw new Error(
        `ZeRO-3: '${
          this.buckets[k].params[0].name
        }' was read outside a training pass; the weights are sharded over the data-parallel group (MeshTrainer.parameters() gathers them)`,
      );
    }
    this.gpu.write(this.regionOf(k, 'value'), host);
    this.enter('value', k);
    if (!this.keepAll) this.pending[k] = null; // written: a training pass keeps one layer at a time
  }

  /** Starts a backward: every unit closed (resident gradients are zeroed by {@link zeroResident} and after each readback). */
  startBackward(): void {
    this.opened.clear();
    this.launched.clear();
    this.leave('value');
    this.leave('grad');
  }

  /**
   * Zeroes the resident units' gradients (a step's start). A resident unit may collect gradients
   * over several backwards before its reduce (an interleaved rank's shared block), so a backward
   * does not zero them; zero_sync.ts zeroes each after its readback.
   */
  zeroResident(): void {
    this.gpu.clear(this.homes.grad.root);
  }

  /** Whether unit k still needs {@link open} in this backward. */
  needsOpen(k: number): boolean {
    return !this.opened.has(k) && !this.resident[k];
  }

  /**
   * Makes rotating unit k current for backward: its gathered values (stage 3) written into the
   * slot and its gradient region zeroed.
   * @throws Error when the slot still holds another block's unit whose gradients were not read
   *   back yet (a layer's weights used outside their layer).
   */
  open(k: number, values: Float32Array | null): void {
    const held = this.inSlot.grad;
    const busy = held.block === this.blockOf[k] ? undefined : [...held.units].find((u) => !this.launched.has(u));
    if (busy !== undefined) {
      throw new Error(
        `ZeRO: '${this.buckets[k].params[0].name}' needs the working slot while '${
          this.buckets[busy].params[0].name
        }' still collects gradients; a block's weights must only be used inside that block`,
      );
    }
    if (values) {
      this.gpu.write(this.regionOf(k, 'value'), values);
      this.enter('value', k);
    }
    this.gpu.clear(this.regionOf(k, 'grad'));
    this.enter('grad', k);
    this.opened.add(k);
  }

  /** Bucket b's gradients for the readback; marks its slot reusable once the copy is encoded. */
  gradsOf(b: Bucket): Tensor {
    this.launched.add(b.index);
    return this.regionOf(b.index, 'grad');
  }
}
