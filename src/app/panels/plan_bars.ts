/**
 * The Plan explorer's stacked bars: one ranked plan as a row — its predicted step time split
 * into compute, exposed communication per dimension, bubble and optimizer (scaled to the slowest
 * plan shown), and its worst rank's memory split into parameters, gradients, optimizer state and
 * activations (scaled to the device's memory, whose edge the track marks). Every bar and segment
 * carries its value and percent width as data attributes (e2e/plan_explorer.spec.ts reads them).
 */
import { type ExplorerRow, type Segment, segmentWidths } from './plan_explore.ts';
import { fmtBytes } from './trace_io.ts';

/** Seconds as the rows print them: ms below one second. */
export const fmtSeconds = (s: number) => (s >= 1 ? `${s.toFixed(3)} s` : s >= 1e-3 ? `${(s * 1e3).toFixed(2)} ms` : `${(s * 1e6).toFixed(1)} µs`);

/** The legend of the time bars (the keys timeSegments gives) and of the memory bars. */
export const TIME_LEGEND: [string, string][] = [
  ['compute', 'compute'], ['comm-dp', 'exposed dp'], ['comm-tp', 'exposed tp'], ['comm-pp', 'exposed pp'], ['comm-cp', 'exposed cp'],
  ['bubble', 'bubble'], ['optimizer', 'optimizer'],
];
export const MEMORY_LEGEND: [string, string][] = [['params', 'parameters'], ['grads', 'gradients'], ['optimizer', 'optimizer state'], ['activations', 'activations']];

/** A legend line: a swatch per key (`.px-seg.<key>` colours). */
export function legend(items: [string, string][], kind: 'time' | 'mem'): HTMLElement {
  const p = document.createElement('p');
  p.className = 'legend';
  for (const [key, text] of items) {
    const i = document.createElement('i');
    i.className = `px-seg ${kind} ${key}`;
    p.append(i, text);
  }
  return p;
}

/** A track of `segments` on a bar whose full width is `scale`, with `total` as its data. */
function track(segments: Segment[], scale: number, total: number, kind: 'time' | 'mem', fmt: (x: number) => string): HTMLElement {
  const t = document.createElement('div');
  t.className = `px-track ${kind}`;
  t.dataset.testid = kind === 'time' ? 'px-time' : 'px-mem';
  t.dataset.total = String(total);
  const widths = segmentWidths(segments, scale);
  t.dataset.width = String(widths.reduce((a, w) => a + w, 0));
  segments.forEach((s, i) => {
    if (!(s.value > 0)) return;
    const seg = document.createElement('span');
    seg.className = `px-seg ${kind} ${s.key}`;
    seg.style.width = `${widths[i]}%`;
    seg.dataset.key = s.key;
    seg.dataset.value = String(s.value);
    seg.dataset.width = String(widths[i]);
    seg.title = `${s.label}: ${fmt(s.value)}`;
    t.append(seg);
  });
  return t;
}

/**
 * One plan's row (a radio of the plans' radiogroup): its line, its time bar over `timeScale`
 * seconds and its memory bar over `deviceMemory` bytes.
 */
export function planRow(row: ExplorerRow, timeScale: number, deviceMemory: number): HTMLElement {
  const r = document.createElement('div');
  r.className = 'px-row';
  r.setAttribute('role', 'radio');
  r.setAttribute('aria-checked', 'false');
  r.tabIndex = row.rank === 1 ? 0 : -1;
  r.dataset.testid = 'px-plan';
  r.dataset.rank = String(row.rank);
  r.dataset.step = String(row.step);
  r.dataset.equivalent = String(row.equivalent);
  const head = document.createElement('div');
  head.className = 'px-head';
  const name = document.createElement('span');
  name.className = 'px-name';
  name.textContent = `${row.rank}. ${row.label}${row.equivalent ? ' · ≈ best' : ''}`;
  const figs = document.createElement('span');
  figs.className = 'px-figs';
  const tf = row.tflops >= 1 ? row.tflops.toFixed(1) : row.tflops.toPrecision(2);
  figs.textContent = `${fmtSeconds(row.step)} · ${tf} TFLOP/s per GPU · MFU ${(100 * row.mfu).toFixed(1)}%`;
  head.append(name, figs);
  const mem = document.createElement('div');
  mem.className = 'px-memline';
  const memText = document.createElement('span');
  memText.className = 'px-memtext';
  memText.textContent = `${fmtBytes(row.memoryTotal)} of ${fmtBytes(deviceMemory)} (${row.memoryStage} stage's rank)`;
  const memTrack = track(row.memory, deviceMemory, row.memoryTotal, 'mem', fmtBytes);
  memTrack.dataset.capacity = String(deviceMemory);
  mem.append(memTrack, memText);
  r.append(head, track(row.time, timeScale, row.step, 'time', fmtSeconds), mem);
  r.setAttribute('aria-label', `${name.textContent}: ${figs.textContent}; ${memText.textContent}`);
  return r;
}
