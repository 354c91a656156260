/**
 * Learn: GPipe against 1F1B, step by step. Both schedules come from the trainer's own
 * generators (src/parallel/pipeline/pipeline_schedule.ts `makeSchedule`, the programs the pipeline
 * ranks execute) and are run by its `dryRun` simulator (backward = 2 × forward, a small
 * message cost); a cursor walks through the action boundaries, showing which micro-batch
 * each stage works on, where it waits (the bubble) and how many activations it holds —
 * GPipe keeps all m alive, 1F1B at most p.
 */
import { bubbleFraction } from '../../parallel/pipeline/pipeline_sim.ts';
import { makeSchedule, peakInFlight, type ScheduleKind } from '../../parallel/pipeline/pipeline_schedule.ts';
import { dryRun, type Span as PipeSpan } from '../../parallel/pipeline/pipeline_sim.ts';

const COSTS = { forwardMs: 1, backwardMs: 2, p2pMs: 0.1 };

/** The GPipe-vs-1F1B lesson: both dry-runs side by side with a stepping cursor. */
export class PipelineLesson {
  private readonly view: HTMLElement;
  private readonly caption: HTMLElement;
  private times: number[] = [];
  private at = 0;
  private runs: { kind: ScheduleKind; ranks: PipeSpan[][]; makespan: number; bubble: number; peak: number[] }[] = [];
  private readonly pSel: HTMLSelectElement;
  private readonly mSel: HTMLSelectElement;

  constructor(host: HTMLElement) {
    host.innerHTML = `
      <p>A pipeline splits the layers into p stages on p ranks; the batch is cut into m micro-batches. Stage i must wait for
      stage i−1's activations (forward, <b>F</b>) and stage i+1's gradients (backward, <b>B</b>): the hatched waits are the
      <b>bubble</b>, (p−1)/(m+p−1) of the step for both schedules. 1F1B starts backwards early, so a stage holds at most p
      micro-batches of activations instead of m.</p>
      <div class="toolbar">
        <label>Stages p <select data-testid="pipe-p"><option>2</option><option>3</option><option selected>4</option></select></label>
        <label>Micro-batches m <select data-testid="pipe-m"><option>1</option><option>2</option><option selected>4</option><option>8</option></select></label>
        <button type="button" data-act="prev">◀ Back</button>
        <button type="button" data-act="next" data-testid="pipe-next">Step ▶</button>
        <button type="button" data-act="end">Show all</button>
      </div>
      <p class="caption" data-testid="pipe-caption" aria-live="polite"></p>
      <div class="pipe-view" data-testid="pipe-view"></div>`;
    this.view = host.querySelector('.pipe-view')!;
    this.caption = host.querySelector('.caption')!;
    this.pSel = host.querySelector('[data-testid="pipe-p"]')!;
    this.mSel = host.querySelector('[data-testid="pipe-m"]')!;
    for (const s of [this.pSel, this.mSel]) s.addEventListener('change', () => this.rebuild());
    const on = (a: string, f: () => void) => host.querySelector(`[data-act="${a}"]`)!.addEventListener('click', f);
    on('prev', () => this.go(this.at - 1));
    on('next', () => this.go(this.at + 1));
    on('end', () => this.go(this.times.length - 1));
    this.rebuild();
  }

  private rebuild(): void {
    const p = Number(this.pSel.value), m = Number(this.mSel.value);
    this.runs = (['gpipe', '1f1b'] as const).map((kind) => {
      const sched = makeSchedule(kind, p, m);
      const d = dryRun(sched, COSTS);
      return { kind, ranks: d.ranks, makespan: d.makespan, bubble: d.bubble, peak: peakInFlight(sched) };
    });
    const ends = new Set<number>([0]);
    for (const r of this.runs) for (const lane of r.ranks) for (const s of lane) if (s.kind === 'compute') ends.add(s.end);
    this.times = [...ends].sort((a, b) => a - b);
    this.go(0);
  }

  private go(k: number): void {
    this.at = Math.max(0, Math.min(this.times.length - 1, k));
    const t = this.times[this.at], p = Number(this.pSel.value), m = Number(this.mSel.value);
    const span = Math.max(...this.runs.map((r) => r.makespan));
    this.view.replaceChildren(...this.runs.map((r) => {
      const block = document.createElement('div');
      block.className = 'pipe-run';
      block.dataset.kind = r.kind;
      const title = document.createElement('div');
      title.className = 'pipe-title';
      title.textContent = `${r.kind === 'gpipe' ? 'GPipe' : '1F1B'} · bubble ${(100 * r.bubble).toFixed(1)}% (formula ${(100 * bubbleFraction(p, m)).toFixed(1)}% without message time) · peak activations held: ${r.peak.join(', ')} micro-batches per stage`;
      block.append(title);
      r.ranks.forEach((lane, i) => {
        const row = document.createElement('div');
        row.className = 'pipe-lane';
        const label = document.createElement('span');
        label.className = 'pipe-label';
        label.textContent = `stage ${i}`;
        row.append(label);
        const track = document.createElement('div');
        track.className = 'pipe-track';
        for (const s of lane) {
          if (s.start >= t && this.at < this.times.length - 1) continue;
          const el = document.createElement('div');
          el.className = `pipe-span ${s.kind}${s.action?.kind === 'backward' ? ' bwd' : ''}`;
          el.style.left = `${(100 * s.start) / span}%`;
          el.style.width = `${(100 * (Math.min(s.end, this.at < this.times.length - 1 ? t : s.end) - s.start)) / span}%`;
          if (s.kind === 'compute') el.textContent = s.label;
          el.title = `${s.kind} ${s.label} ${s.start.toFixed(1)}–${s.end.toFixed(1)}`;
          track.append(el);
        }
        if (this.at < this.times.length - 1) {
          const future = document.createElement('div');
          future.className = 'pipe-future';
          future.style.left = `${(100 * t) / span}%`;
          track.append(future);
        }
        const cursor = document.createElement('div');
        cursor.className = 'pipe-cursor';
        cursor.style.left = `${(100 * t) / span}%`;
        track.append(cursor);
        row.append(track);
        block.append(row);
      });
      return block;
    }));
    const doing = this.runs.map((r) => {
      const act = r.ranks.map((lane) => lane.find((s) => s.kind === 'compute' && s.start <= t && s.end > t)?.label ?? 'waits');
      return `${r.kind === 'gpipe' ? 'GPipe' : '1F1B'}: ${act.map((a, i) => `stage ${i} ${a}`).join(', ')}`;
    });
    this.caption.textContent = `t = ${t.toFixed(1)} (forward = 1, backward = 2, message = 0.1 time units). ${this.at === this.times.length - 1 ? 'End of the step.' : doing.join(' · ')}`;
  }
}
