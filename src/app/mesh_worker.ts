/**
 * The Mesh panel's renderer, in a worker: WebGPU renders into a texture, the frame is copied
 * to a mappable buffer and goes back to the page as an ImageBitmap. A worker because WebGPU
 * devices open reliably in workers wherever the rank workers train (headless Chromium's
 * main-thread WebGPU on SwiftShader loses its device at once); a read-back instead of a
 * WebGPU canvas because SwiftShader's canvas presentation stays blank there (compute-style
 * copies work everywhere), and a bitmap because it composites like any 2-D image. The page (src/app/mesh_view.ts) owns the camera, layout and link activity and sends
 * only what changes per frame.
 *
 * Messages in: `{ kind: 'init', code }` (the WGSL of shaders/mesh_view.wgsl), then
 * `{ kind: 'frame', width, height, frame (20 f32: view-projection + light), cubes (8 f32 per
 * rank), links (12 f32 per link), nCubes, nLinks }`. Out: `{ kind: 'ready' }`, `{ kind:
 * 'frame', bitmap }` or `{ kind: 'error', message }`.
 */

interface FrameMsg {
  kind: 'frame';
  width: number;
  height: number;
  frame: Float32Array;
  cubes: Float32Array;
  links: Float32Array;
  nCubes: number;
  nLinks: number;
}

let device: GPUDevice;
/** The colour target and its read-back buffer (rows padded to 256 bytes, as copies require). */
let target: GPUTexture | null = null;
let readback: GPUBuffer | null = null;
let rowBytes = 0;
const FORMAT: GPUTextureFormat = 'rgba8unorm';
let cubePipeline: GPURenderPipeline;
let linkPipeline: GPURenderPipeline;
let frameBuf: GPUBuffer;
let depth: GPUTexture | null = null;
const bufs: Record<'cubes' | 'links', GPUBuffer | null> = { cubes: null, links: null };

const post = (msg: unknown, transfer: Transferable[] = []) => (globalThis as unknown as { postMessage(m: unknown, t: Transferable[]): void }).postMessage(msg, transfer);

async function init(code: string): Promise<void> {
  const adapter = await navigator.gpu?.requestAdapter();
  if (!adapter) throw new Error('No WebGPU adapter for the mesh view');
  device = await adapter.requestDevice();
  device.addEventListener('uncapturederror', (e) => post({ kind: 'error', message: (e as GPUUncapturedErrorEvent).error.message }));
  const format = FORMAT;
  const module = device.createShaderModule({ code, label: 'mesh_view' });
  const depthStencil: GPUDepthStencilState = { format: 'depth24plus', depthWriteEnabled: true, depthCompare: 'less' };
  const pipeline = (vs: string, fs: string, topology: GPUPrimitiveTopology) =>
    device.createRenderPipeline({
      layout: 'auto',
      vertex: { module, entryPoint: vs },
      fragment: { module, entryPoint: fs, targets: [{ format }] },
      primitive: { topology, cullMode: 'none' },
      depthStencil,
    });
  cubePipeline = pipeline('cube_vs', 'cube_fs', 'triangle-list');
  linkPipeline = pipeline('link_vs', 'link_fs', 'line-list');
  frameBuf = device.createBuffer({ size: 80, usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST });
}

/** Writes `data` into the named storage buffer, growing it when needed. */
function upload(which: 'cubes' | 'links', data: Float32Array): GPUBuffer {
  const size = Math.max(64, data.byteLength);
  if (!bufs[which] || bufs[which]!.size < size) {
    bufs[which]?.destroy();
    bufs[which] = device.createBuffer({ size, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST });
  }
  if (data.byteLength) device.queue.writeBuffer(bufs[which]!, 0, data);
  return bufs[which]!;
}

async function draw(m: FrameMsg): Promise<void> {
  const { width: w, height: h } = m;
  if (!target || target.width !== w || target.height !== h) {
    for (const t of [target, depth]) t?.destroy();
    readback?.destroy();
    target = device.createTexture({ size: [w, h], format: FORMAT, usage: GPUTextureUsage.RENDER_ATTACHMENT | GPUTextureUsage.COPY_SRC });
    depth = device.createTexture({ size: [w, h], format: 'depth24plus', usage: GPUTextureUsage.RENDER_ATTACHMENT });
    rowBytes = Math.ceil((w * 4) / 256) * 256;
    readback = device.createBuffer({ size: rowBytes * h, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  }
  device.queue.writeBuffer(frameBuf, 0, m.frame);
  const cubes = upload('cubes', m.cubes), links = upload('links', m.links);
  const enc = device.createCommandEncoder();
  const pass = enc.beginRenderPass({
    colorAttachments: [{ view: target.createView(), clearValue: [0.07, 0.08, 0.1, 1], loadOp: 'clear', storeOp: 'store' }],
    depthStencilAttachment: { view: depth!.createView(), depthClearValue: 1, depthLoadOp: 'clear', depthStoreOp: 'store' },
  });
  if (m.nCubes) {
    pass.setPipeline(cubePipeline);
    pass.setBindGroup(0, device.createBindGroup({
      layout: cubePipeline.getBindGroupLayout(0),
      entries: [{ binding: 0, resource: { buffer: frameBuf } }, { binding: 1, resource: { buffer: cubes } }],
    }));
    pass.draw(36, m.nCubes);
  }
  if (m.nLinks) {
    pass.setPipeline(linkPipeline);
    pass.setBindGroup(0, device.createBindGroup({
      layout: linkPipeline.getBindGroupLayout(0),
      entries: [{ binding: 0, resource: { buffer: frameBuf } }, { binding: 2, resource: { buffer: links } }],
    }));
    pass.draw(2, m.nLinks);
  }
  pass.end();
  enc.copyTextureToBuffer({ texture: target }, { buffer: readback!, bytesPerRow: rowBytes }, [w, h]);
  device.queue.submit([enc.finish()]);
  const buf = readback!;
  await buf.mapAsync(GPUMapMode.READ);
  const src = new Uint8Array(buf.getMappedRange()), px = new Uint8ClampedArray(w * h * 4);
  for (let y = 0; y < h; y++) px.set(src.subarray(y * rowBytes, y * rowBytes + w * 4), y * w * 4);
  buf.unmap();
  const bitmap = await createImageBitmap(new ImageData(px, w, h));
  post({ kind: 'frame', bitmap }, [bitmap]);
}

globalThis.addEventListener('message', async (ev: Event) => {
  const m = (ev as MessageEvent).data as { kind: 'init'; code: string } | FrameMsg;
  try {
    if (m.kind === 'init') {
      await init(m.code);
      post({ kind: 'ready' });
    } else await draw(m);
  } catch (e) {
    post({ kind: 'error', message: (e as Error).message ?? String(e) });
  }
});
