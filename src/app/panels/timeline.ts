/**
 * The Timeline panel: one lane per rank drawn on a canvas from trace spans — compute (blue),
 * communication (orange) and idle gaps (hatched grey; pipeline bubbles), with a thin row of
 * the rank's messages underneath. Wheel or the +/− buttons zoom around the pointer / centre,
 * drag or ←/→ pans, hovering names the op, bytes, peer and group. "Export trace.json" writes
 * the spans as Chrome Trace Event JSON for Perfetto (src/comm/trace.ts `toChromeTrace`).
 */
import { outerSyncLine } from './outer_view.ts';
import { type Span, toChromeTrace } from '../../comm/trace.ts';
import { buildLanes, type Clock, fmtBytes, idleShare, type Lane, laneTotals, type Segment } from './trace_io.ts';
import { AXIS_H, COLOURS, fmtT, LABEL_W, LANE_H, paintLanes, segmentAt, tOf, type View } from './timeline_canvas.ts';

/** Builds the panel inside `host`; call {@link TimelinePanel.setSpans} with a run's trace. */
export class TimelinePanel {
  private readonly canvas: HTMLCanvasElement;
  private readonly tip: HTMLElement;
  private readonly summary: HTMLElement;
  private readonly shares: HTMLTableElement;
  private readonly clockSel: HTMLSelectElement;
  private readonly windowSel: HTMLSelectElement;
  private readonly exportBtn: HTMLButtonElement;
  private spans: Span[] = [];
  private meta: Record<string, unknown> = {};
  private lanes: Lane[] = [];
  private end = 0;
  /** Visible window [x0, x1] in the clock's unit. */
  private x0 = 0;
  private x1 = 1;

  constructor(host: HTMLElement) {
    host.innerHTML = `
      <div class="toolbar" role="toolbar" aria-label="Timeline controls">
        <label>Clock <select data-testid="timeline-clock"><option value="wall">wall (ms)</option><option value="sim">simulated (µs)</option></select></label>
        <label>Show <select data-testid="timeline-window"><option value="all">whole run</option></select></label>
        <button type="button" data-zoom="in" aria-label="Zoom in">+</button>
        <button type="button" data-zoom="out" aria-label="Zoom out">−</button>
        <button type="button" data-zoom="left" aria-label="Pan left">←</button>
        <button type="button" data-zoom="right" aria-label="Pan right">→</button>
        <button type="button" data-zoom="reset">Whole run</button>
        <button type="button" data-testid="export-trace" disabled>Export trace.json</button>
        <span class="legend"><i style="background:${COLOURS.compute}"></i>compute <i style="background:${COLOURS.comm}"></i>communication
          <i class="idle"></i>idle <i style="background:${COLOURS.send}"></i>send <i style="background:${COLOURS.recv}"></i>recv</span>
      </div>
      <p class="summary" data-testid="timeline-summary">No trace yet: start a run with more than one rank, or open a run.</p>
      <div class="timeline-box"><canvas data-testid="timeline-canvas" tabindex="0" role="img" aria-label="Per-rank timeline"></canvas>
      <div class="tip" data-testid="timeline-tip" hidden></div></div>
      <p class="hint">Each lane is one rank (one worker). Blue: it computes; orange: it is inside a collective or receiving
      data; hatched: it waits with nothing to do — in a pipeline, the bubble. The thin row marks each message sent or received.</p>
      <table class="totals" data-testid="timeline-shares"></table>`;
    this.canvas = host.querySelector('canvas')!;
    this.tip = host.querySelector('.tip')!;
    this.summary = host.querySelector('.summary')!;
    this.shares = host.querySelector('[data-testid="timeline-shares"]')!;
    this.clockSel = host.querySelector('[data-testid="timeline-clock"]')!;
    this.windowSel = host.querySelector('[data-testid="timeline-window"]')!;
    this.windowSel.addEventListener('change', () => {
      this.picked = true;
      this.fitWindow();
    });
    this.exportBtn = host.querySelector('[data-testid="export-trace"]')!;
    this.clockSel.addEventListener('change', () => this.rebuild());
    host.querySelectorAll<HTMLButtonElement>('[data-zoom]').forEach((b) => b.addEventListener('click', () => this.command(b.dataset.zoom!)));
    this.exportBtn.addEventListener('click', () => this.export());
    this.listen();
    new ResizeObserver(() => this.draw()).observe(this.canvas);
  }

  /** Shows `spans` (any ranks, any order); `meta` goes into the exported trace's otherData. */
  setSpans(spans: readonly Span[], meta: Record<string, unknown> = {}): void {
    if (!spans.length) this.picked = false;
    this.spans = [...spans];
    this.meta = meta;
    this.exportBtn.disabled = !spans.length;
    this.rebuild();
  }

  private rebuild(): void {
    const { lanes, end } = buildLanes(this.spans, this.clockSel.value as Clock);
    this.lanes = lanes;
    this.end = end;
    this.x0 = 0;
    this.x1 = end || 1;
    const count = (k: Segment['kind']) => lanes.reduce((a, l) => a + l.segments.filter((g) => g.kind === k).length, 0);
    const unit = this.clockSel.value === 'wall' ? 'ms' : 'µs';
    this.summary.textContent = lanes.length
      ? `${lanes.length} ranks · ${this.spans.length} spans · ${end.toFixed(1)} ${unit} · ${count('compute')} compute, ` +
        `${count('comm')} communication, ${count('idle')} idle segments · idle ${(100 * idleShare(lanes, end)).toFixed(1)}% of rank-time` +
        outerSyncLine(this.spans)
      : 'No trace yet: start a run with more than one rank, or open a run.';
    this.summary.dataset.idle = String(count('idle'));
    this.summary.dataset.comm = String(count('comm'));
    this.summary.dataset.compute = String(count('compute'));
    this.summary.dataset.ops = [...new Set(this.spans.filter((s) => s.kind !== 'compute').map((s) => `${s.kind}:${s.op}`))].sort().join(' ');
    this.canvas.style.height = `${AXIS_H + Math.max(1, lanes.length) * LANE_H + 4}px`;
    this.fillWindows();
    this.fitWindow();
  }

  /**
   * Time windows of the traced optimizer steps (compute spans named `step N`, as
   * src/parallel/run/run.ts records them): from the first rank starting step N to the first rank
   * starting step N+1 (or the end). Step 0 includes kernel compilation, so a run of several
   * steps opens on its last one.
   */
  private steps: { label: string; a: number; b: number }[] = [];
  /** The user chose a window (the view stops following the newest step). */
  private picked = false;

  private fillWindows(): void {
    const clock = this.clockSel.value as Clock, at = (s: Span) => (clock === 'wall' ? s.start : s.simStart);
    const t0 = this.spans.reduce((m, s) => Math.min(m, at(s)), Infinity);
    const first = new Map<number, number>();
    for (const s of this.spans) {
      const m = s.kind === 'compute' ? /^step (\d+)$/.exec(s.op) : null;
      if (m) first.set(Number(m[1]), Math.min(first.get(Number(m[1])) ?? Infinity, at(s) - t0));
    }
    const ids = [...first.keys()].sort((a, b) => a - b);
    this.steps = ids.map((id, i) => ({ label: `step ${id}`, a: first.get(id)!, b: i + 1 < ids.length ? first.get(ids[i + 1])! : this.end }));
    const keep = this.windowSel.value;
    this.windowSel.replaceChildren(new Option('whole run', 'all'), ...this.steps.map((w, i) => new Option(w.label, String(i))));
    // Follow the newest step while the run goes on, unless the user picked a window.
    const last = this.steps.length > 1 ? String(this.steps.length - 1) : 'all';
    this.windowSel.value = this.picked && [...this.windowSel.options].some((o) => o.value === keep) ? keep : last;
  }

  private fitWindow(): void {
    const w = this.steps[Number(this.windowSel.value)];
    this.x0 = w ? w.a : 0;
    this.x1 = w ? Math.max(w.b, w.a + 1e-6) : this.end || 1;
    this.draw();
  }

  private command(c: string): void {
    const w = this.x1 - this.x0, mid = (this.x0 + this.x1) / 2;
    if (c === 'in') this.zoomAt(mid, 0.5);
    else if (c === 'out') this.zoomAt(mid, 2);
    else if (c === 'left') this.pan(-w * 0.25);
    else if (c === 'right') this.pan(w * 0.25);
    else {
      this.windowSel.value = 'all';
      this.fitWindow();
    }
  }

  private zoomAt(x: number, factor: number): void {
    const w = Math.min(Math.max((this.x1 - this.x0) * factor, (this.end || 1) * 1e-4), (this.end || 1) * 1.05);
    const f = (x - this.x0) / (this.x1 - this.x0 || 1);
    this.x0 = x - f * w;
    this.x1 = this.x0 + w;
    this.pan(0);
  }

  private pan(dx: number): void {
    const w = this.x1 - this.x0;
    this.x0 = Math.max(-w * 0.02, Math.min(this.x0 + dx, (this.end || 1) - w * 0.98));
    this.x1 = this.x0 + w;
    this.draw();
  }

  private get view(): View {
    return { x0: this.x0, x1: this.x1 };
  }

  private draw(): void {
    if (!this.canvas.clientWidth || !this.canvas.clientHeight) return;
    this.tabulate();
    paintLanes(this.canvas, this.lanes, this.view, this.clockSel.value === 'wall' ? 'ms' : 'µs');
  }

  /** Per rank: compute, communication and idle time in the visible window. */
  private tabulate(): void {
    const unit = this.clockSel.value === 'wall' ? 'ms' : 'µs';
    const head = `<thead><tr><td>in view</td><td>compute</td><td>communication</td><td>idle</td></tr></thead>`;
    const rows = this.lanes.map((l) => {
      const t = laneTotals(l, this.x0, this.x1), all = t.compute + t.comm + t.idle || 1;
      const cell = (x: number) => `<td>${fmtT(x)} ${unit} (${Math.round((100 * x) / all)}%)</td>`;
      return `<tr><td>rank ${l.rank}</td>${cell(t.compute)}${cell(t.comm)}${cell(t.idle)}</tr>`;
    });
    this.shares.innerHTML = rows.length ? head + rows.join('') : '';
  }

  private describe(s: Segment): string {
    const unit = this.clockSel.value === 'wall' ? 'ms' : 'µs';
    const dur = `${(s.end - s.start).toFixed(3)} ${unit} at ${s.start.toFixed(3)}`;
    const p = s.span;
    if (s.kind === 'idle') return p ? `idle, waiting for data from rank ${p.peer} (${p.op} in group ${p.group}) · ${dur}` : `idle · ${dur}`;
    if (!p) return dur;
    const parts = [`${p.kind} ${p.op}${p.algorithm ? ` (${p.algorithm})` : ''}`, dur];
    if (p.bytes) parts.push(fmtBytes(p.bytes));
    if (p.peer >= 0) parts.push(`${p.kind === 'recv' ? 'from' : 'to'} rank ${p.peer}`);
    if (p.group) parts.push(`group ${p.group}`);
    return parts.join(' · ');
  }

  private listen(): void {
    const c = this.canvas;
    let drag: number | null = null;
    c.addEventListener('wheel', (e) => {
      e.preventDefault();
      const r = c.getBoundingClientRect();
      this.zoomAt(tOf(this.view, e.clientX - r.left, c.clientWidth), Math.exp(e.deltaY * 0.002));
    }, { passive: false });
    c.addEventListener('pointerdown', (e) => (drag = e.clientX));
    c.addEventListener('pointerup', () => (drag = null));
    c.addEventListener('pointerleave', () => {
      drag = null;
      this.tip.hidden = true;
    });
    c.addEventListener('pointermove', (e) => {
      const r = c.getBoundingClientRect(), x = e.clientX - r.left, y = e.clientY - r.top;
      if (drag !== null) {
        this.pan(-((e.clientX - drag) / (c.clientWidth - LABEL_W)) * (this.x1 - this.x0));
        drag = e.clientX;
      }
      const s = segmentAt(this.lanes, this.view, x, y, c.clientWidth);
      this.tip.hidden = !s;
      if (s) {
        this.tip.textContent = this.describe(s);
        this.tip.style.left = `${Math.min(x + 12, c.clientWidth - 260)}px`;
        this.tip.style.top = `${y + 14}px`;
      }
    });
    c.addEventListener('keydown', (e) => {
      const map: Record<string, string> = { '+': 'in', '=': 'in', '-': 'out', ArrowLeft: 'left', ArrowRight: 'right', '0': 'reset' };
      if (map[e.key]) {
        e.preventDefault();
        this.command(map[e.key]);
      }
    });
  }

  private export(): void {
    const json = JSON.stringify(toChromeTrace(this.spans, this.meta));
    const a = document.createElement('a');
    a.href = URL.createObjectURL(new Blob([json], { type: 'application/json' }));
    a.download = 'trace.json';
    a.click();
    setTimeout(() => URL.revokeObjectURL(a.href), 5000);
  }
}
