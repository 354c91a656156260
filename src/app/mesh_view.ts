/**
 * The Mesh panel: the rank grid drawn in 3-D with WebGPU, an orbit camera from `wgpu-matrix`,
 * ranks coloured by their group along a chosen dimension, and links that light up while they
 * carry data. The GPU work runs in src/app/mesh_worker.ts (its own device, frames come back as
 * ImageBitmaps drawn on a 2-D canvas); this side keeps the camera, the
 * layout and the link activity, and asks for a frame only when something changed or a link is
 * still fading, so an idle panel costs nothing.
 *
 * Keyboard: arrow keys orbit, + and − zoom (the canvas takes focus with Tab).
 */
import { mat4 } from 'wgpu-matrix';
import type { MeshDim } from '../comm/mesh.ts';
import { groupColour, layoutMesh, meshLinks, type MeshLink, type RankCube } from './mesh_layout.ts';

const LINK_COLOURS: Record<MeshDim, [number, number, number]> = {
  dp: [0.35, 0.6, 1.0],
  pp: [1.0, 0.55, 0.25],
  cp: [0.75, 0.45, 1.0],
  tp: [0.3, 0.85, 0.5],
};
/** Seconds for a link's glow to fall to 1/e after a message. */
const FADE_S = 0.5;

export class MeshView {
  private readonly output: CanvasRenderingContext2D;
  private cubes: RankCube[] = [];
  private links: MeshLink[] = [];
  private activity: Float32Array = new Float32Array(0);
  private cubeData = new Float32Array(0);
  private yaw = 0.6;
  private pitch = 0.45;
  private distance = 9;
  private raf = 0;
  private last = 0;
  /** A frame is being rendered by the worker; another request waits for it. */
  private inFlight = false;
  private again = false;
  /** Runs after every frame is shown. */
  onFrame: (() => void) | null = null;
  /** Where rank labels go (absolutely positioned over the canvas); null: no labels. */
  labels: HTMLElement | null = null;
  /** The view-projection of the frame in flight, for placing its labels. */
  private shownVP: Float32Array | null = null;

  private constructor(private readonly worker: Worker, readonly canvas: HTMLCanvasElement, private readonly onError: (message: string) => void) {
    this.output = canvas.getContext('2d')!;
    worker.addEventListener('message', (ev) => {
      const m = ev.data as { kind: string; bitmap?: ImageBitmap; message?: string };
      if (m.kind === 'frame') {
        const b = m.bitmap!;
        if (this.canvas.width !== b.width || this.canvas.height !== b.height) {
          this.canvas.width = b.width;
          this.canvas.height = b.height;
        }
        this.output.drawImage(b, 0, 0);
        b.close();
        this.placeLabels();
        this.inFlight = false;
        this.onFrame?.();
        if (this.again) this.requestDraw();
      } else if (m.kind === 'error') this.onError(m.message!);
    });
    this.listen();
  }

  /**
   * Starts the render worker, which opens its own device and compiles shaders/mesh_view.wgsl.
   * `onError` hears later rendering errors.
   * @throws Error when WebGPU or an adapter is missing, or the shader cannot be fetched.
   */
  static async create(canvas: HTMLCanvasElement, onError: (message: string) => void = (m) => console.error(`mesh view: ${m}`)): Promise<MeshView> {
    if (!('gpu' in navigator)) throw new Error('WebGPU is not available for the mesh view');
    const res = await fetch(new URL('../../shaders/mesh_view.wgsl', import.meta.url));
    if (!res.ok) throw new Error(`Cannot load the mesh view shader: HTTP ${res.status}`);
    const code = await res.text();
    const worker = new Worker(new URL('./mesh_worker.ts', import.meta.url), { type: 'module', name: 'mesh-view' });
    await new Promise<void>((resolve, reject) => {
      const done = (ev: MessageEvent) => {
        worker.removeEventListener('message', done);
        if (ev.data.kind === 'ready') resolve();
        else reject(new Error(ev.data.message ?? 'the mesh view worker failed'));
      };
      worker.addEventListener('message', done);
      worker.addEventListener('error', (e) => reject(new Error(e.message || 'the mesh view worker failed to load')));
      worker.postMessage({ kind: 'init', code });
    }).catch((e) => {
      worker.terminate();
      throw e;
    });
    return new MeshView(worker, canvas, onError);
  }

  /**
   * Shows the grid `shape` = [dp, pp, cp, tp]: cubes coloured by their group along `colourBy`,
   * links of every dimension with more than one rank.
   * @throws Error from DeviceMesh when a size is not a positive integer.
   */
  setMesh(shape: readonly [number, number, number, number], colourBy: MeshDim): void {
    this.cubes = layoutMesh(shape, colourBy);
    const dims = (['dp', 'pp', 'cp', 'tp'] as const).filter((_, i) => shape[i] > 1);
    this.links = meshLinks(shape, dims);
    this.activity = new Float32Array(this.links.length);
    const groups = Math.max(...this.cubes.map((c) => c.group)) + 1;
    this.cubeData = new Float32Array(this.cubes.length * 8);
    this.cubes.forEach((c, i) => {
      this.cubeData.set([...c.position, 0.38, ...groupColour(c.group, groups), 0], i * 8);
    });
    this.distance = 4 + 1.8 * Math.max(shape[0], shape[1], shape[2] * shape[3]);
    this.requestDraw();
  }

  /** Lights the link between world ranks `a` and `b` (either order); unknown pairs are ignored. */
  pulse(a: number, b: number): void {
    let hit = false;
    this.links.forEach((l, i) => {
      if ((l.a === a && l.b === b) || (l.a === b && l.b === a)) {
        this.activity[i] = 1;
        hit = true;
      }
    });
    if (hit) this.requestDraw();
  }

  /** Stops drawing and ends the render worker (and its device). */
  destroy(): void {
    cancelAnimationFrame(this.raf);
    this.worker.terminate();
  }

  private requestDraw(): void {
    if (this.inFlight) {
      this.again = true;
      return;
    }
    if (!this.raf) this.raf = requestAnimationFrame((t) => this.draw(t));
  }

  private draw(now: number): void {
    this.raf = 0;
    this.again = false;
    if (!this.cubes.length) return;
    const dt = this.last ? (now - this.last) / 1000 : 0;
    this.last = now;
    const decay = Math.exp(-dt / FADE_S);
    let glowing = false;
    const linkData = new Float32Array(this.links.length * 12);
    this.links.forEach((l, i) => {
      this.activity[i] *= decay;
      if (this.activity[i] < 0.01) this.activity[i] = 0;
      else glowing = true;
      linkData.set([...this.cubes[l.a].position, 0, ...this.cubes[l.b].position, 0, ...LINK_COLOURS[l.dim], this.activity[i]], i * 12);
    });
    const frame = new Float32Array(20);
    this.shownVP = this.viewProj();
    frame.set(this.shownVP, 0);
    frame.set([0.4, 0.9, 0.6, 0], 16);
    const width = Math.max(1, Math.floor(this.canvas.clientWidth * devicePixelRatio));
    const height = Math.max(1, Math.floor(this.canvas.clientHeight * devicePixelRatio));
    this.inFlight = true;
    this.worker.postMessage({ kind: 'frame', width, height, frame, cubes: this.cubeData, links: linkData, nCubes: this.cubes.length, nLinks: this.links.length });
    if (glowing) this.again = true;
    else this.last = 0;
  }

  /** Puts "rank r" over each cube's centre, projected with the shown frame's camera. */
  private placeLabels(): void {
    const host = this.labels, m = this.shownVP;
    if (!host || !m) return;
    while (host.childElementCount < this.cubes.length) host.append(document.createElement('span'));
    while (host.childElementCount > this.cubes.length) host.lastElementChild!.remove();
    const w = this.canvas.clientWidth, h = this.canvas.clientHeight;
    this.cubes.forEach((c, i) => {
      const [x, y, z] = c.position;
      // Column-major 4×4 times (x, y, z, 1).
      const clip = [0, 1, 2, 3].map((k) => m[k] * x + m[4 + k] * y + m[8 + k] * z + m[12 + k]);
      const el = host.children[i] as HTMLElement;
      el.textContent = `rank ${c.rank}`;
      el.style.left = `${((clip[0] / clip[3] + 1) / 2) * w}px`;
      el.style.top = `${((1 - clip[1] / clip[3]) / 2) * h}px`;
      el.hidden = clip[3] <= 0;
    });
  }

  private viewProj(): Float32Array {
    const aspect = this.canvas.clientWidth / Math.max(1, this.canvas.clientHeight) || 1;
    const eye = [
      this.distance * Math.cos(this.pitch) * Math.sin(this.yaw),
      this.distance * Math.sin(this.pitch),
      this.distance * Math.cos(this.pitch) * Math.cos(this.yaw),
    ];
    const proj = mat4.perspective(Math.PI / 4, aspect, 0.1, 100);
    const view = mat4.lookAt(eye, [0, 0, 0], [0, 1, 0]);
    return mat4.multiply(proj, view) as Float32Array;
  }

  private orbit(dYaw: number, dPitch: number, zoom = 1): void {
    this.yaw += dYaw;
    this.pitch = Math.max(-1.45, Math.min(1.45, this.pitch + dPitch));
    this.distance = Math.max(2, Math.min(60, this.distance * zoom));
    this.requestDraw();
  }

  private listen(): void {
    const c = this.canvas;
    let drag: { x: number; y: number } | null = null;
    c.addEventListener('pointerdown', (e) => {
      drag = { x: e.clientX, y: e.clientY };
      c.setPointerCapture(e.pointerId);
    });
    c.addEventListener('pointermove', (e) => {
      if (!drag) return;
      this.orbit(-(e.clientX - drag.x) * 0.01, (e.clientY - drag.y) * 0.01);
      drag = { x: e.clientX, y: e.clientY };
    });
    c.addEventListener('pointerup', () => (drag = null));
    c.addEventListener('wheel', (e) => {
      e.preventDefault();
      this.orbit(0, 0, Math.exp(e.deltaY * 0.001));
    }, { passive: false });
    c.addEventListener('keydown', (e) => {
      const step = 0.12;
      const moves: Record<string, [number, number, number]> = {
        ArrowLeft: [step, 0, 1],
        ArrowRight: [-step, 0, 1],
        ArrowUp: [0, step, 1],
        ArrowDown: [0, -step, 1],
        '+': [0, 0, 0.9],
        '=': [0, 0, 0.9],
        '-': [0, 0, 1.1],
      };
      const m = moves[e.key];
      if (!m) return;
      e.preventDefault();
      this.orbit(...m);
    });
    new ResizeObserver(() => this.requestDraw()).observe(c);
  }
}
