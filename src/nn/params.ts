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
  | { kind: 'normal'; std: number }
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

const ALIGN_ELEMS = 64; // 256 bytes: minStorageBufferOffsetAlignment's usual value

export class ParamStore {
  readonly params: Param[] = [];
  /** The flat buffers as tensors (elements = padded total). */
  readonly values: Tensor;
  readonly grads: Tensor;
  readonly m: Tensor;
  readonly v: Tensor;
  /** Sum of parameter sizes (without alignment padding). */
  readonly count: number;

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
    const bytes = Math.max(total, 1) * 4;
    checkBufferSize(gpu.device, bytes, 'flat parameter buffer');
    checkBindingSize(gpu.device, bytes, 'flat parameter buffer');
    const make = (label: string) => {
      const buf = gpu.device.createBuffer({ size: bytes, usage: STORAGE_USAGE, label });
      return new Tensor(gpu, buf, [total], 'f32', 0, false, label);
    };
    this.values = make('params');
    this.grads = make('grads');
    this.m = make('adam.m');
    this.v = make('adam.v');
    const host = new Float32Array(total);
    let count = 0;
    specs.forEach((s, i) => {
      const size = s.shape.reduce((a, b) => a * b, 1);
      const off = offsets[i];
      const slice = (t: Tensor, kind: string) => new Tensor(gpu, t.buffer, s.shape, 'f32', off * 4, false, `${kind}${s.name}`);
      const init = s.init;
      for (let j = 0; j < size; j++) {
        host[off + j] = init.kind === 'normal' ? random() * init.std : init.kind === 'const' ? init.value : init.at(j);
      }
      this.params.push({ ...s, value: slice(this.values, ''), grad: slice(this.grads, 'grad.'), m: slice(this.m, 'm.'), v: slice(this.v, 'v.'), offset: off, size });
      count += size;
    });
    this.count = count;
    gpu.write(this.values, host);
    gpu.clear(this.grads);
    gpu.clear(this.m);
    gpu.clear(this.v);
  }

  /** Parameter by name. @throws Error listing the known names when absent. */
  get(name: string): Param {
    const p = this.params.find((q) => q.name === name);
    if (!p) throw new Error(`No parameter '${name}'`);
    return p;
  }

  /** value tensor → gradient slice, for the tape. */
  gradMap(): Map<Tensor, Tensor> {
    return new Map(this.params.map((p) => [p.value, p.grad]));
  }

  /** Encodes zeroing of all gradients. */
  zeroGrad(): void {
    this.gpu.clear(this.grads);
  }

  destroy(): void {
    for (const t of [this.values, this.grads, this.m, this.v]) t.buffer.destroy();
  }
}
