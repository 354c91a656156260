/**
 * Parameters live in flat buffers (llm.c's layout): one GPUBuffer each for values,
 * gradients and the two AdamW moments, every parameter a 256-byte-aligned slice. Zeroing
 * gradients is one clear, the grad norm is one reduction, and checkpoints walk one list.
 */
import type { Gpu } from '../gpu/context.ts';
import { Tensor } from '../gpu/tensor.ts';
import { STORAGE_USAGE } from '../gpu/pool.ts';
import { checkBindingSize, checkBufferSize } from '../gpu/limits.ts';

/** How a parameter is initialised (GPT-2 / nanoGPT `_init_weights`). */
export type Init =
  /**
   * N(0, std²); with `drawn`, only the first `drawn` elements are drawn and the rest are zero
   * (a --pad-vocab embedding's padded rows, models/vocab_pad.ts).
   */
  | { kind: 'normal'; std: number; drawn?: number }
  | { kind: 'const'; value: number }
  /** Deterministic per-element values (Mamba's A and dt initialisations); draws no random numbers. */
  | { kind: 'values'; at: (index: number) => number };

/** One parameter's declaration. `decay` selects AdamW weight decay (nanoGPT: matrices only). */
export interface ParamSpec {
  name: string;
  shape: number[];
  init: Init;
  decay: boolean;
}

/** A declared parameter: its value slice and gradient slice. */
export interface Param extends ParamSpec {
  value: Tensor;
  grad: Tensor;
  m: Tensor;
  v: Tensor;
  /** Offset in elements within the flat buffers. */
  offset: number;
  size: number;
}

/**
 * A zero-filled f32 buffer of `elements` outside the pool, owned by whoever made it (the flat
 * parameter buffers, ZeRO's shards and working slots).
 * @throws DeviceLimitError when it exceeds maxBufferSize / maxStorageBufferBindingSize.
 */
export function storageTensor(gpu: Gpu, elements: number, label: string): Tensor {
  const bytes = Math.max(elements, 1) * 4;
  checkBufferSize(gpu.device, bytes, label);
  checkBindingSize(gpu.device, bytes, label);
  const buf = gpu.device.createBuffer({ size: bytes, usage: STORAGE_USAGE, label });
  return new Tensor(gpu, buf, [elements], 'f32', 0, false, label);
}

/**
 * A parameter's initial values as its declaration draws them: one standard normal per element
 * for 'normal' (in element order), the constant, or the per-element values. The one place
 * weights are drawn, so a rank that keeps a shard sees exactly the single-rank run's numbers.
 */
export function drawValues(s: ParamSpec, random: () => number): Float32Array {
  const init = s.init, out = new Float32Array(s.shape.reduce((a, b) => a * b, 1));
  const drawn = init.kind === 'normal' ? Math.min(init.drawn ?? out.length, out.length) : 0;
  for (let j = 0; j < out.length; j++) {
    out[j] = init.kind === 'normal'
      ? (j < drawn ? random() * init.std : 0)
      : init.kind === 'const'
      ? init.value
      : init.at(j);
  }
  return out;
}

/**
 * Where a rank keeps one declared parameter: its local shape and its slice of the full values
 * (a tensor-parallel shard), or null when the rank does not hold it (another pipeline stage).
 * `copy` marks a second copy of a parameter another rank owns (a pipeline's head copy of a tied
 * embedding): it is stored after every owned parameter.
 */
export type Placement = (
  s: ParamSpec,
) => { shape: number[]; slice: (full: Float32Array) => Float32Array; copy?: boolean } | null;

/**
 * The parameters a rank holds under `place`, each initialised with its slice of the whole
 * model's values drawn from `random` in declaration order (every parameter is drawn, kept or
 * not, so every rank's numbers are the single-rank model's); copies last.
 * @throws Error when a slice has the wrong length for its local shape.
 */
export function placeSpecs(specs: ParamSpec[], random: () => number, place: Placement): ParamSpec[] {
  const own: ParamSpec[] = [], copies: ParamSpec[] = [];
  const places = specs.map((s) => place(s));
  // Drawn on the first value asked for, every parameter in declaration order: a store on a meta
  // GPU (gpu/meta.ts) asks for none, so counting a 175B-parameter model's shards draws nothing.
  let drawn: (Float32Array | null)[] | null = null;
  const draw = () =>
    drawn ??= specs.map((s, i) => {
      const values = drawValues(s, random), where = places[i];
      if (!where) return null;
      const local = where.slice(values);
      if (local.length !== where.shape.reduce((a, b) => a * b, 1)) {
        throw new Error(`placeSpecs: '${s.name}' slice of ${local.length} elements for shape [${where.shape}]`);
      }
      return local;
    });
  specs.forEach((s, i) => {
    const where = places[i];
    if (!where) return;
    (where.copy ? copies : own).push({ ...s, shape: where.shape, init: { kind: 'values', at: (j) => draw()[i]![j] } });
  });
  return [...own, ...copies];
}

const ALIGN_ELEMS = 64; // 256 bytes: minStorageBufferOffsetAlignment's usual value

/** The per-parameter buffers a store holds flat: values, gradients and the two AdamW moments. */
export type ParamField = 'value' | 'grad' | 'm' | 'v';
const FIELDS: readonly ParamField[] = ['value', 'grad', 'm', 'v'];

export class ParamStore {
  readonly params: Param[] = [];
  /** Sum of parameter sizes (without alignment padding). */
  readonly count: number;
  /** Elements of each flat buffer (parameters plus alignment padding): offsets index into this range. */
  readonly flatSize: number;
  /**
   * Called by {@link get} with the parameter a model asks for, just before it is used. ZeRO-3
   * uses it as FSDP's pre-forward hook: it writes a gathered layer into its working buffer
   * when the model first reaches for one of the layer's weights.
   */
  onAccess: ((p: Param) => void) | null = null;
  private readonly flat: Record<ParamField, Tensor | null>;
  private readonly moved: Partial<Record<ParamField, { why: string; owned: readonly Tensor[] }>> = {};

  /**
   * Allocates the flat buffers for `specs` and initialises values from `random`
   * (a standard-normal sampler), in declaration order so a seed reproduces the weights.
   * @throws DeviceLimitError when the flat buffer exceeds maxBufferSize / maxStorageBufferBindingSize.
   */
  constructor(readonly gpu: Gpu, specs: ParamSpec[], random: () => number) {
    const align = Math.max(ALIGN_ELEMS, gpu.device.limits.minStorageBufferOffsetAlignment / 4);
    let total = 0;
    const offsets: number[] = [];
    const seen = new Set<string>();
    for (const s of specs) {
      if (seen.has(s.name)) throw new Error(`Duplicate parameter name '${s.name}'`);
      seen.add(s.name);
      offsets.push(total);
      total += Math.ceil(s.shape.reduce((a, b) => a * b, 1) / align) * align;
    }
    const make = (label: string) => storageTensor(gpu, total, `flat parameter buffer '${label}'`);
    this.flatSize = total;
    this.flat = { value: make('params'), grad: make('grads'), m: make('adam.m'), v: make('adam.v') };
    // A meta GPU (gpu/meta.ts) holds no values: nothing is drawn or written.
    const host = gpu.isMeta ? null : new Float32Array(total);
    let count = 0;
    specs.forEach((s, i) => {
      const size = s.shape.reduce((a, b) => a * b, 1);
      const off = offsets[i];
      const slice = (t: Tensor, kind: string) =>
        new Tensor(gpu, t.buffer, s.shape, 'f32', off * 4, false, `${kind}${s.name}`);
      host?.set(drawValues(s, random), off);
      this.params.push({
        ...s,
        value: slice(this.values, ''),
        grad: slice(this.grads, 'grad.'),
        m: slice(this.m, 'm.'),
        v: slice(this.v, 'v.'),
        offset: off,
        size,
      });
      count += size;
    });
    this.count = count;
    if (host) gpu.write(this.values, host);
    gpu.clear(this.grads);
    gpu.clear(this.m);
    gpu.clear(this.v);
  }

  /** The flat buffers as tensors (elements = {@link flatSize}). @throws Error once the buffer was moved by {@link rehome}. */
  get values(): Tensor {
    return this.flatOf('value');
  }
  get grads(): Tensor {
    return this.flatOf('grad');
  }
  get m(): Tensor {
    return this.flatOf('m');
  }
  get v(): Tensor {
    return this.flatOf('v');
  }

  private flatOf(f: ParamField): Tensor {
    const t = this.flat[f];
    if (!t) throw new Error(`ParamStore: the flat ${f} buffer is gone: ${this.moved[f]!.why}`);
    return t;
  }

  /**
   * Frees the flat buffer of `field` and gives every parameter's `field` a new home: the view
   * `place(p)` returns (inside one of `owned`, which the store destroys with itself), or none
   * (`place` null: reading `p[field]` then throws with `why`). ZeRO uses it to drop what a
   * stage shards away: the AdamW moments (every stage), the gradients (stage 2, kept per
   * layer) and the values (stage 3).
   * @throws Error when `field` was already moved or a view's shape differs from the parameter's.
   */
  rehome(field: ParamField, place: ((p: Param) => Tensor) | null, owned: readonly Tensor[], why: string): void {
    const flat = this.flatOf(field);
    for (const p of this.params) {
      if (!place) {
        Object.defineProperty(p, field, {
          get: () => {
            throw new Error(`ParamStore: ${p.name}.${field} is gone: ${why}`);
          },
          configurable: true,
        });
        continue;
      }
      const t = place(p);
      if (t.size !== p.size) {
        throw new Error(`ParamStore.rehome: ${p.name}'s new ${field} has ${t.size} elements, the parameter ${p.size}`);
      }
      p[field] = t;
    }
    // Work already encoded against the flat buffer (its initial clear) may still be running, and
    // wgpu must not see a buffer destroyed in flight: submit it, and destroy once the queue is done.
    this.gpu.flush();
    void this.gpu.device.queue.onSubmittedWorkDone().then(() => flat.buffer.destroy(), () => {});
    this.flat[field] = null;
    this.moved[field] = { why, owned };
  }

  /**
   * The flat buffers a training run must keep across steps (values and AdamW moments; gradients
   * are zeroed every step), named for a checkpoint: those {@link rehome} has not moved away.
   */
  trainingState(): Record<string, Tensor> {
    const out: Record<string, Tensor> = {};
    for (const [f, name] of [['value', 'params'], ['m', 'adam.m'], ['v', 'adam.v']] as const) {
      const t = this.flat[f];
      if (t) out[name] = t;
    }
    return out;
  }

  /** Bytes of GPU memory each field holds now: the flat buffer, or what {@link rehome} gave it. */
  allocatedBytes(): Record<ParamField, number> {
    const out = {} as Record<ParamField, number>;
    for (const f of FIELDS) {
      out[f] = this.flat[f]?.buffer.size ?? (this.moved[f]?.owned ?? []).reduce((a, t) => a + t.bytes, 0);
    }
    return out;
  }

  /** Parameter by name. @throws Error listing the known names when absent. */
  get(name: string): Param {
    const p = this.params.find((q) => q.name === name);
    if (!p) throw new Error(`No parameter '${name}'`);
    this.onAccess?.(p);
    return p;
  }

  /** value tensor → gradient slice, for the tape. */
  gradMap(): Map<Tensor, Tensor> {
    return new Map(this.params.map((p) => [p.value, p.grad]));
  }

  /** Encodes zeroing of all gradients. */
  zeroGrad(): void {
    for (const t of this.flat.grad ? [this.flat.grad] : this.moved.grad!.owned) this.gpu.clear(t);
  }

  destroy(): void {
    // Commands still being encoded may use the buffers; a submit after destroy is a validation error.
    this.gpu.flush();
    for (const f of FIELDS) {
      this.flat[f]?.buffer.destroy();
      for (const t of this.moved[f]?.owned ?? []) t.buffer.destroy();
    }
  }
}

/** Parameters `ps` of a flat buffer laid out as the store lays them (alignment gaps skipped), back to back. */
export function packParams(flat: Float32Array, ps: readonly Param[]): Float32Array {
  const out = new Float32Array(ps.reduce((a, p) => a + p.size, 0));
  let off = 0;
  for (const p of ps) out.set(flat.subarray(p.offset, p.offset + p.size), (off += p.size) - p.size);
  return out;
}

/** Inverse of {@link packParams}: `packed` back into `flat` at each parameter's offset (gaps untouched). */
export function unpackParams(packed: Float32Array, flat: Float32Array, ps: readonly Param[]): void {
  let off = 0;
  for (const p of ps) flat.set(packed.subarray(off, off += p.size), p.offset);
}
