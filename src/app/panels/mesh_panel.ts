/**
 * The Mesh panel: the [dp, pp, cp, tp] rank grid in 3-D (src/app/mesh_view.ts, its own
 * WebGPU device in a render worker, started the first time the panel is shown), a colour-by selector, and a replay
 * of the trace's sends: each message lights the link between its two ranks at its (scaled)
 * time, so the links that carry the run's bytes pulse in the order they did.
 */
import type { Span } from '../../comm/trace.ts';
import type { MeshDim } from '../../comm/mesh.ts';
import { MeshView } from '../mesh_view.ts';

type Shape = [number, number, number, number];

/** The Mesh view around a {@link MeshView}: shape, colouring and traffic replay. */
export class MeshPanel {
  private view: MeshView | null = null;
  private opening: Promise<MeshView | null> | null = null;
  private shape: Shape = [1, 1, 1, 1];
  private spans: Span[] = [];
  private timers: ReturnType<typeof setTimeout>[] = [];
  private colourPicked = false;
  private readonly canvas: HTMLCanvasElement;
  private readonly colour: HTMLSelectElement;
  private readonly status: HTMLElement;
  private readonly replayBtn: HTMLButtonElement;

  constructor(host: HTMLElement) {
    host.innerHTML = `
      <div class="toolbar">
        <label>Colour ranks by <select data-testid="mesh-colour">
          <option value="dp">data-parallel group</option><option value="pp">pipeline group</option>
          <option value="cp">context-parallel group</option><option value="tp" selected>tensor-parallel group</option></select></label>
        <button type="button" data-testid="mesh-replay" disabled>Replay traffic</button>
        <span class="hint">Drag or arrow keys orbit; wheel or +/− zoom. Tensor-parallel ranks sit side by side (x), pipeline stages stack up (y), data-parallel replicas go back (z).</span>
      </div>
      <p class="summary" data-testid="mesh-status">The mesh appears when this panel opens.</p>
      <div class="mesh-box"><canvas class="mesh-canvas" data-testid="mesh-canvas" tabindex="0" role="img" aria-label="3-D view of the rank grid"></canvas>
      <div class="mesh-labels" aria-hidden="true"></div></div>`;
    this.canvas = host.querySelector('.mesh-canvas')!;
    this.colour = host.querySelector('select')!;
    this.status = host.querySelector('[data-testid="mesh-status"]')!;
    this.replayBtn = host.querySelector('[data-testid="mesh-replay"]')!;
    this.colour.addEventListener('change', () => {
      this.colourPicked = true;
      this.apply();
    });
    this.replayBtn.addEventListener('click', () => this.replay());
  }

  /** Sets the grid [dp, pp, cp, tp]; redraws if the view is open. */
  setShape(shape: Shape): void {
    this.shape = shape;
    // Colour by a dimension that has groups (tp by default), until the user picks one.
    if (!this.colourPicked) {
      const dims = ['tp', 'dp', 'pp', 'cp'] as const, size = { dp: shape[0], pp: shape[1], cp: shape[2], tp: shape[3] };
      this.colour.value = dims.find((d) => size[d] > 1) ?? 'tp';
    }
    this.apply();
  }

  /** The trace whose sends the replay lights up. */
  setSpans(spans: readonly Span[]): void {
    this.spans = spans.filter((s) => s.kind === 'send');
    this.replayBtn.disabled = !this.spans.length;
  }

  /** Opens the view (first call) and draws; resolves false when WebGPU drawing is unavailable. */
  async show(): Promise<boolean> {
    this.opening ??= MeshView.create(this.canvas, (m) => (this.status.textContent = `The 3-D view failed: ${m}`)).catch((e) => {
      this.status.textContent = `The 3-D view could not open: ${(e as Error).message}`;
      return null;
    });
    this.view = await this.opening;
    if (this.view) this.view.labels = this.canvas.parentElement!.querySelector('.mesh-labels');
    this.apply();
    return !!this.view;
  }

  /** Lights the links of sends as they happen (live runs). */
  pulse(from: number, to: number): void {
    this.view?.pulse(from, to);
  }

  private apply(): void {
    if (!this.view) return;
    const world = this.shape.reduce((a, b) => a * b, 1);
    this.view.setMesh(this.shape, this.colour.value as MeshDim);
    this.status.textContent = `${world} ranks as dp ${this.shape[0]} × pp ${this.shape[1]} × cp ${this.shape[2]} × tp ${this.shape[3]}` +
      (this.spans.length ? ` · ${this.spans.length} sends in the trace: press Replay traffic` : '');
    this.status.dataset.ready = 'true';
  }

  /** Replays the sends over about 4 s of real time, in the order and spacing the trace recorded. */
  replay(): void {
    for (const t of this.timers) clearTimeout(t);
    this.timers = [];
    if (!this.spans.length || !this.view) return;
    const t0 = Math.min(...this.spans.map((s) => s.start)), t1 = Math.max(...this.spans.map((s) => s.start));
    const scale = 4000 / Math.max(1e-9, t1 - t0);
    for (const s of this.spans) this.timers.push(setTimeout(() => this.view?.pulse(s.rank, s.peer), (s.start - t0) * scale));
  }
}
