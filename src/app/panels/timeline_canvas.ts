/**
 * The Timeline panel's canvas: its geometry (lane height, the label column, where a time falls
 * on the canvas and back) and its painting — the time axis, each rank's compute, communication
 * and hatched idle bars, the row of message ticks — plus which segment a point hits. Kept apart
 * from timeline.ts, which holds the panel's state, step windows, zoom and pan and its DOM, so
 * the drawing reads as a function of lanes and a visible window.
 */
import type { Lane, Segment } from './trace_io.ts';

/** A time on the axis: three significant digits without exponents. */
export const fmtT = (x: number) => (Math.abs(x) >= 100 ? x.toFixed(0) : Math.abs(x) >= 10 ? x.toFixed(1) : x.toFixed(2));

export const COLOURS = { compute: '#3b82f6', comm: '#f59e0b', idle: '#9ca3af', send: '#16a34a', recv: '#a855f7' };
export const LANE_H = 46, BAR_H = 26, MSG_Y = 31, MSG_H = 9, LABEL_W = 64, AXIS_H = 22;

/** The visible window [x0, x1], in the clock's unit. */
export interface View {
  x0: number;
  x1: number;
}

/** Canvas x (CSS px) of time `t` on a canvas `width` px wide. */
export function xOf(v: View, t: number, width: number): number {
  return LABEL_W + ((t - v.x0) / (v.x1 - v.x0 || 1)) * (width - LABEL_W - 6);
}

/** The time at canvas x `px`: the inverse of {@link xOf}. */
export function tOf(v: View, px: number, width: number): number {
  return v.x0 + ((px - LABEL_W) / (width - LABEL_W - 6)) * (v.x1 - v.x0);
}

/** Paints the axis and every lane of `lanes` in window `v` on `c` (already sized by its CSS). */
export function paintLanes(c: HTMLCanvasElement, lanes: readonly Lane[], v: View, unit: string): void {
  const dpr = devicePixelRatio || 1;
  const w = c.clientWidth, h = c.clientHeight;
  c.width = Math.round(w * dpr);
  c.height = Math.round(h * dpr);
  const g = c.getContext('2d')!;
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  const css = getComputedStyle(document.documentElement);
  const text = css.getPropertyValue('--text').trim() || '#111', muted = css.getPropertyValue('--muted').trim() || '#666';
  g.clearRect(0, 0, w, h);
  g.font = '12px system-ui, sans-serif';
  g.fillStyle = muted;
  for (let i = 0; i <= 5; i++) {
    const t = v.x0 + ((v.x1 - v.x0) * i) / 5, x = xOf(v, t, w);
    g.fillRect(x, AXIS_H - 4, 1, 4);
    g.textAlign = i === 0 ? 'left' : i === 5 ? 'right' : 'center';
    // Offsets from the window's start read better than absolute times deep into a run.
    const label = i === 0 ? `${fmtT(t)} ${unit}` : `+${fmtT(t - v.x0)}`;
    g.fillText(label, x, 12);
  }
  g.textAlign = 'left';
  const hatch = hatchOf(g);
  lanes.forEach((lane, i) => {
    const y = AXIS_H + i * LANE_H;
    g.fillStyle = text;
    g.fillText(`rank ${lane.rank}`, 6, y + 19);
    for (const s of lane.segments) bar(g, v, s, y + 2, BAR_H, w, s.kind === 'idle' ? hatch : COLOURS[s.kind]);
    for (const m of lane.messages) bar(g, v, m, y + MSG_Y, MSG_H, w, COLOURS[m.span!.kind === 'send' ? 'send' : 'recv'], 2);
  });
}

function bar(g: CanvasRenderingContext2D, v: View, s: Segment, y: number, hgt: number, w: number, fill: string | CanvasPattern, minW = 1): void {
  const a = xOf(v, s.start, w), b = xOf(v, s.end, w);
  if (b < LABEL_W || a > w) return;
  const x = Math.max(LABEL_W, a);
  g.fillStyle = fill;
  g.fillRect(x, y, Math.max(minW, Math.min(b, w) - x), hgt);
}

function hatchOf(g: CanvasRenderingContext2D): CanvasPattern | string {
  const p = document.createElement('canvas');
  p.width = p.height = 6;
  const q = p.getContext('2d')!;
  q.fillStyle = 'rgba(156,163,175,0.25)';
  q.fillRect(0, 0, 6, 6);
  q.strokeStyle = COLOURS.idle;
  q.beginPath();
  q.moveTo(0, 6);
  q.lineTo(6, 0);
  q.stroke();
  return g.createPattern(p, 'repeat') ?? COLOURS.idle;
}

/** The segment under canvas point (x, y) of a canvas `width` px wide, messages first (they are drawn on top). */
export function segmentAt(lanes: readonly Lane[], v: View, x: number, y: number, width: number): Segment | null {
  const i = Math.floor((y - AXIS_H) / LANE_H), lane = lanes[i];
  if (!lane || x < LABEL_W) return null;
  const t = tOf(v, x, width), slack = (2 * (v.x1 - v.x0)) / width;
  const inRow = (y - AXIS_H) % LANE_H;
  const list = inRow > MSG_Y - 2 ? lane.messages : lane.segments;
  return list.find((s) => t >= s.start - slack && t <= s.end + slack) ?? null;
}
