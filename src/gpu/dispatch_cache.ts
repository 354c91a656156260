/**
 * What a dispatch reuses across calls: compute pipelines compiled once per kernel key, uniform
 * buffers cached by content, and bind groups cached by (kernel, buffer, offset, size) of every
 * binding. Separate from the {@link Gpu} context (context.ts), which owns the device, the pool and
 * the open command encoder: this module only creates and remembers device objects, it encodes
 * nothing.
 */
import { Tensor } from './tensor.ts';
import type { Binding, KernelCode } from './context.ts';

const MAX_BIND_GROUPS_CACHED = 8192;

export class DispatchCache {
  private pipelines = new Map<string, GPUComputePipeline>();
  private uniforms = new Map<string, GPUBuffer>();
  private bindGroups = new Map<string, GPUBindGroup>();
  private bufferIds = new WeakMap<GPUBuffer, number>();
  private nextBufferId = 1;

  constructor(private readonly device: GPUDevice) {}

  /** The compute pipeline for a kernel, compiled once per `key`. */
  pipeline(k: KernelCode): GPUComputePipeline {
    let p = this.pipelines.get(k.key);
    if (!p) {
      const module = this.device.createShaderModule({ code: k.code, label: k.key });
      p = this.device.createComputePipeline({
        layout: 'auto',
        compute: { module, entryPoint: k.entryPoint ?? 'main' },
        label: k.key,
      });
      this.pipelines.set(k.key, p);
    }
    return p;
  }

  /**
   * The bind group of one dispatch of `k` through `pipeline`: binding i is `bindings[i]` (holes
   * skipped), `params` (when given) a uniform at binding `bindings.length`. The cache is emptied
   * when it grows past {@link MAX_BIND_GROUPS_CACHED} groups.
   */
  bindGroup(
    k: KernelCode,
    pipeline: GPUComputePipeline,
    bindings: readonly Binding[],
    params: Uint32Array | null,
  ): GPUBindGroup {
    const entries: GPUBindGroupEntry[] = [];
    bindings.forEach((b, binding) => {
      if (b) entries.push({ binding, resource: b instanceof Tensor ? b.binding() : b });
    });
    if (params) entries.push({ binding: bindings.length, resource: { buffer: this.uniform(params) } });
    let key = k.key;
    for (const e of entries) {
      const r = e.resource as GPUBufferBinding;
      key += `|${e.binding}=${this.bufferId(r.buffer)}:${r.offset ?? 0}:${r.size ?? -1}`;
    }
    let bg = this.bindGroups.get(key);
    if (!bg) {
      if (this.bindGroups.size > MAX_BIND_GROUPS_CACHED) this.bindGroups.clear();
      bg = this.device.createBindGroup({
        layout: pipeline.getBindGroupLayout(0),
        entries,
      });
      this.bindGroups.set(key, bg);
    }
    return bg;
  }

  private uniform(params: Uint32Array): GPUBuffer {
    const key = params.join(',');
    let buf = this.uniforms.get(key);
    if (!buf) {
      const size = Math.max(16, Math.ceil(params.byteLength / 16) * 16);
      buf = this.device.createBuffer({
        size,
        usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST,
        mappedAtCreation: true,
      });
      new Uint32Array(buf.getMappedRange()).set(params);
      buf.unmap();
      this.uniforms.set(key, buf);
    }
    return buf;
  }

  private bufferId(b: GPUBuffer): number {
    let id = this.bufferIds.get(b);
    if (id === undefined) this.bufferIds.set(b, id = this.nextBufferId++);
    return id;
  }
}
