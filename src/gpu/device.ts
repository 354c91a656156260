/**
 * Opening a GPUDevice in every runtime the sandbox supports: the browser,
 * Deno's built-in WebGPU (wgpu) and Dawn (`npm:webgpu`, from Deno or Node).
 * docs/design.md#runtimes-and-devices lists the drivers each needs on a machine without a GPU.
 */
import { dawnAdapterFlag } from './dawn_adapters.ts';

/** Which WebGPU implementation to use. `auto` takes `navigator.gpu` when present, else Dawn. */
export type Backend = 'auto' | 'wgpu' | 'dawn' | 'browser';

/** The backends accepted by `--gpu`. */
export const BACKENDS: readonly Backend[] = ['auto', 'wgpu', 'dawn', 'browser'];

/** What `openDevice` returns: the device plus what was chosen, for logs and metrics. */
export interface OpenedDevice {
  device: GPUDevice;
  adapterInfo: { vendor: string; architecture: string; device: string; description: string };
  /** The implementation actually used (never `auto`). */
  backend: Exclude<Backend, 'auto'>;
  /** Features enabled on the device (subset of what the adapter offers). */
  features: string[];
  /**
   * A software adapter (lavapipe, SwiftShader, WARP): kernels prefer one invocation per row
   * there, because workgroup barriers cost more than the arithmetic they synchronise.
   */
  isCpu: boolean;
  /** The software driver behind the adapter ({@link softwareDriver}: 'llvmpipe', 'swiftshader', …), else null. */
  softwareDriver: string | null;
  /** Closes the device; on Dawn this also lets the process exit. */
  close(): void;
}

/** Options for {@link openDevice}. */
export interface OpenOptions {
  backend?: Backend;
  /** Prints adapter and limits once (default true). */
  log?: (line: string) => void;
  powerPreference?: GPUPowerPreference;
  /**
   * Dawn only: which adapter, by name substring or index into the adapters Dawn finds
   * (dawn_adapters.ts). With backend `auto` it selects Dawn.
   */
  adapter?: string;
  /** Upper bounds on the limits raised to the adapter's maximum, so a test can open a device as small as another adapter's. */
  maxLimits?: Partial<Record<RaisedLimit, number>>;
}

/** Limits we raise to the adapter's maximum when offered. */
const RAISED_LIMITS = [
  'maxBufferSize',
  'maxStorageBufferBindingSize',
  'maxComputeWorkgroupStorageSize',
  'maxComputeInvocationsPerWorkgroup',
  'maxComputeWorkgroupSizeX',
  'maxComputeWorkgroupSizeY',
  'maxComputeWorkgroupsPerDimension',
  'maxStorageBuffersPerShaderStage',
] as const;
type RaisedLimit = (typeof RAISED_LIMITS)[number];

/** Optional features we enable when present; kernels gate fast paths on them. */
const WANTED_FEATURES = ['shader-f16', 'subgroups', 'timestamp-query'] as const;

/** Where Debian's Chromium ships SwiftShader's Vulkan ICD (Dawn rejects Mesa 22's lavapipe). */
const SWIFTSHADER_ICD = '/usr/lib/chromium/vk_swiftshader_icd.json';

interface DenoLike {
  env: { get(k: string): string | undefined; set(k: string, v: string): void; delete(k: string): void };
  build: { os: string };
  statSync(p: string): unknown;
  pid: number;
}
const deno = (globalThis as unknown as { Deno?: DenoLike }).Deno;

/**
 * Deno's wgpu opens every backend it finds, on Linux OpenGL through libEGL as well as Vulkan, although
 * the adapter it returns here is Vulkan's. Loading libEGL is what broke clean exits: at exit the main
 * thread runs libEGL's destructors while a runtime thread that is ending frees its thread-local state,
 * and glibc aborts ("free(): invalid pointer", "corrupted size vs. prev_size") after a finished run
 * (docs/design.md#runtime-quirks). So on Linux, unless the user chose backends, Deno's WebGPU is
 * limited to Vulkan through its own variable, read when the first adapter is requested.
 */
function vulkanOnlyOnLinux(): void {
  if (deno?.build.os === 'linux' && deno.env.get(WGPU_BACKENDS_ENV) === undefined) {
    deno.env.set(WGPU_BACKENDS_ENV, 'vulkan');
  }
}

/** Deno's variable that picks the backends of its WebGPU (a comma list: vulkan, gl, metal, dx12). */
export const WGPU_BACKENDS_ENV = 'DENO_WEBGPU_BACKEND';

/**
 * Names the process that added SwiftShader for its own Dawn. The variable is process-wide and
 * child processes inherit it, and Deno's wgpu then picks SwiftShader too, where a tiny training
 * run grows past 8 GB. So a process that inherited it from another pid drops it before any
 * adapter is opened; workers of the adding process share its pid and keep it.
 */
const ADDED_BY = 'WEBGPU_SANDBOX_SWIFTSHADER_PID';
if (deno && deno.env.get(ADDED_BY) && deno.env.get(ADDED_BY) !== String(deno.pid)) {
  // Only our own addition goes: a child started with drivers of its own choosing keeps them.
  if (deno.env.get('VK_ADD_DRIVER_FILES') === SWIFTSHADER_ICD) deno.env.delete('VK_ADD_DRIVER_FILES');
  deno.env.delete(ADDED_BY);
}

function fileExists(path: string): boolean {
  try {
    deno?.statSync(path);
    return deno !== undefined;
  } catch {
    return false;
  }
}

/** Adds SwiftShader as an extra Vulkan driver for Dawn, unless the user chose drivers. */
function addSwiftShaderForDawn(): void {
  if (!deno) return;
  const chosen = ['VK_ICD_FILENAMES', 'VK_DRIVER_FILES', 'VK_ADD_DRIVER_FILES'].some((k) => deno.env.get(k));
  if (!chosen && fileExists(SWIFTSHADER_ICD)) {
    deno.env.set('VK_ADD_DRIVER_FILES', SWIFTSHADER_ICD);
    deno.env.set(ADDED_BY, String(deno.pid));
  }
}

/**
 * Dawn's GPU object must outlive every device made from it: collecting it crashes Dawn. The
 * promise is kept, not the object, so ranks opening devices at once in one thread share one
 * instance instead of each creating one and dropping the other's.
 */
const dawnInstances = new Map<string, Promise<GPU>>();

function dawnGpu(adapter?: string): Promise<GPU> {
  const key = adapter ?? '';
  let gpu = dawnInstances.get(key);
  if (!gpu) {
    gpu = createDawnGpu(adapter).catch((e) => {
      dawnInstances.delete(key);
      throw e;
    });
    dawnInstances.set(key, gpu);
  }
  return gpu;
}

async function createDawnGpu(adapter?: string): Promise<GPU> {
  addSwiftShaderForDawn();
  // A computed specifier keeps Vite and tsc from trying to resolve a Deno-only import.
  const spec = 'npm:webgpu';
  const mod = (await import(/* @vite-ignore */ spec)) as {
    create(flags: string[]): GPU;
    globals: Record<string, unknown>;
  };
  // Dawn's classes (GPUBufferUsage, …) must be global for code written against the web API.
  for (const [k, v] of Object.entries(mod.globals)) {
    if (!(k in globalThis)) (globalThis as Record<string, unknown>)[k] = v;
  }
  const flags = ['backend=vulkan'];
  if (adapter !== undefined) flags.push(await dawnAdapterFlag(adapter, (f) => mod.create(f), flags));
  return mod.create(flags);
}

function noAdapterError(backend: Exclude<Backend, 'auto'>): Error {
  const hint = backend === 'wgpu'
    ? "Deno's WebGPU needs a Vulkan driver: on Debian/Ubuntu without a GPU install 'mesa-vulkan-drivers' (lavapipe); or try --gpu=dawn (a machine with OpenGL only: set DENO_WEBGPU_BACKEND=gl)."
    : backend === 'dawn'
    ? `Dawn needs a Vulkan driver it accepts: install Debian's 'chromium' (it ships SwiftShader at ${SWIFTSHADER_ICD}) or a GPU driver; or try --gpu=wgpu.`
    : 'This browser exposes navigator.gpu but gave no adapter: enable WebGPU (chrome://flags/#enable-unsafe-webgpu) or update the GPU driver.';
  return new Error(`No WebGPU adapter on backend '${backend}'. ${hint}`);
}

/**
 * Opens a GPUDevice with the adapter's larger limits and the useful optional features.
 *
 * @throws Error naming the missing driver package when no adapter exists, or when the
 *   chosen backend is not available in this runtime (e.g. `wgpu` outside Deno).
 */
export async function openDevice(opts: OpenOptions = {}): Promise<OpenedDevice> {
  const want = opts.backend ?? 'auto';
  if (!BACKENDS.includes(want)) {
    throw new Error(`Unknown GPU backend '${want}'; allowed: ${BACKENDS.join(', ')}`);
  }
  const isDeno = deno !== undefined;
  const nav = (globalThis as { navigator?: { gpu?: GPU } }).navigator;
  let backend: Exclude<Backend, 'auto'>;
  if (want === 'auto') {
    backend = opts.adapter !== undefined ? 'dawn' : nav?.gpu ? (isDeno ? 'wgpu' : 'browser') : 'dawn';
  } else backend = want;
  if (opts.adapter !== undefined && backend !== 'dawn') {
    throw new Error(
      `--adapter picks among several GPUs through Dawn: use --gpu=dawn (or auto); ${
        backend === 'wgpu' ? "Deno's built-in WebGPU" : 'a browser'
      } chooses its adapter itself`,
    );
  }

  let gpu: GPU | undefined;
  if (backend === 'dawn') {
    if (!isDeno) throw new Error("--gpu=dawn needs Deno (it loads 'npm:webgpu'); in a browser use --gpu=browser");
    gpu = await dawnGpu(opts.adapter);
  } else {
    if (backend === 'wgpu' && !isDeno) {
      throw new Error("--gpu=wgpu is Deno's built-in WebGPU; this runtime is not Deno");
    }
    if (backend === 'wgpu') vulkanOnlyOnLinux();
    gpu = nav?.gpu;
    if (!gpu) {
      throw new Error(
        backend === 'browser'
          ? 'This browser has no WebGPU (navigator.gpu is undefined): use a current Chrome or Edge, or enable WebGPU in the browser flags.'
          : "Deno's WebGPU is unavailable: run with 'deno run -A' (Deno ≥ 2), or try --gpu=dawn.",
      );
    }
  }
  let adapter: GPUAdapter | null;
  try {
    adapter = await gpu.requestAdapter({ powerPreference: opts.powerPreference ?? 'high-performance' });
  } catch (e) {
    // Dawn rejects when no adapter has the --adapter name, listing the ones it found.
    if (opts.adapter === undefined) throw e;
    throw new Error(`--adapter ${opts.adapter}: ${(e as Error).message.replace(/\s*\n\s*/g, ' ')}`);
  }
  if (!adapter) throw noAdapterError(backend);

  const requiredLimits: Record<string, number> = {};
  for (const name of RAISED_LIMITS) {
    const v = (adapter.limits as unknown as Record<string, number>)[name];
    if (typeof v === 'number') requiredLimits[name] = Math.min(v, opts.maxLimits?.[name] ?? v);
  }
  const features = WANTED_FEATURES.filter((f) => adapter.features.has(f)) as GPUFeatureName[];
  const device = await adapter.requestDevice({ requiredLimits, requiredFeatures: features });
  const info = adapter.info ?? { vendor: '', architecture: '', device: '', description: '' };
  const adapterInfo = {
    vendor: info.vendor,
    architecture: info.architecture,
    device: info.device,
    description: info.description,
  };
  const log = opts.log;
  if (log) {
    const L = device.limits;
    log(
      `gpu: ${backend} · ${adapterInfo.description || adapterInfo.vendor || 'unknown adapter'} · ` +
        `maxBuffer ${mib(L.maxBufferSize)} · maxStorageBinding ${mib(L.maxStorageBufferBindingSize)} · ` +
        `workgroup storage ${L.maxComputeWorkgroupStorageSize} B · invocations ${L.maxComputeInvocationsPerWorkgroup}` +
        (features.length ? ` · ${features.join(', ')}` : ''),
    );
  }
  const fallback = (info as { isFallbackAdapter?: boolean }).isFallbackAdapter === true;
  const driver = softwareDriver(adapterInfo);
  return {
    device,
    adapterInfo,
    backend,
    isCpu: fallback || driver !== null,
    softwareDriver: driver,
    features: features as string[],
    close: () => device.destroy(),
  };
}

/**
 * The CPU driver an adapter runs on, lower-cased ('llvmpipe' for lavapipe, 'swiftshader', 'warp', …), read from its
 * description or, where a browser masks the description, its architecture; null for a GPU.
 */
export function softwareDriver(info: { description: string; architecture: string }): string | null {
  const m = /llvmpipe|lavapipe|swiftshader|softpipe|basic render|warp/i.exec(
    `${info.description} ${info.architecture}`,
  );
  return m ? m[0].toLowerCase() : null;
}

function mib(bytes: number): string {
  return `${(bytes / 2 ** 20).toFixed(0)} MiB`;
}
