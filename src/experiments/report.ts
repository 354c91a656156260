/**
 * Output of the experiments: markdown and CSV tables and SVG line charts, written into the
 * experiment's run folder. The chart is hand-written SVG: the only plotting library in the
 * project (uPlot) draws on a DOM canvas, which Deno does not have, and the project adds no
 * npm packages for this.
 */

/** One line of a chart: (x, y) points in drawing order. */
export interface Series {
  name: string;
  points: [number, number][];
  /** Dashed stroke, e.g. to tell a second metric of the same run apart. */
  dashed?: boolean;
  /** Palette slot; series of one run share it (default: the series' position). */
  color?: number;
}

const PALETTE = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2', '#17becf'];

const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

/** About five round tick values covering [lo, hi]. */
export function ticks(lo: number, hi: number, n = 5): number[] {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / n;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw)!;
  const out: number[] = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Number(v.toPrecision(12)));
  return out;
}

/**
 * An SVG line chart (640×360 by default) with axes, ticks, a legend and one polyline per
 * series; the y range covers every point (or `yRange` when given).
 * @throws Error when no series has a point.
 */
export function lineChart(
  o: {
    title: string;
    xLabel: string;
    yLabel: string;
    series: Series[];
    yRange?: [number, number];
    width?: number;
    height?: number;
  },
): string {
  const pts = o.series.flatMap((s) => s.points);
  if (!pts.length) throw new Error(`lineChart '${o.title}': no points to draw`);
  const [w, h] = [o.width ?? 640, o.height ?? 360];
  const [l, r, t, b] = [64, 240, 32, 44];
  const xs = pts.map((p) => p[0]);
  const ys = pts.map((p) => p[1]);
  const [x0, x1] = [Math.min(...xs), Math.max(...xs)];
  let [y0, y1] = o.yRange ?? [Math.min(...ys), Math.max(...ys)];
  if (y1 === y0) [y0, y1] = [y0 - 0.5, y1 + 0.5];
  const pad = (y1 - y0) * 0.05;
  if (!o.yRange) [y0, y1] = [y0 - pad, y1 + pad];
  const px = (x: number) => l + ((w - l - r) * (x - x0)) / Math.max(1e-12, x1 - x0);
  const py = (y: number) => h - b - ((h - t - b) * (y - y0)) / (y1 - y0);
  const parts = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${w}" height="${h}" viewBox="0 0 ${w} ${h}" font-family="sans-serif" font-size="11">`,
    `<rect width="${w}" height="${h}" fill="white"/>`,
    // Lines leaving a given yRange are cut at the plot area.
    `<clipPath id="plot"><rect x="${l}" y="${t}" width="${w - l - r}" height="${h - t - b}"/></clipPath>`,
    `<text x="${(l + w - r) / 2}" y="18" text-anchor="middle" font-size="13">${esc(o.title)}</text>`,
  ];
  for (const v of ticks(y0, y1).filter((v) => v >= y0 && v <= y1)) {
    parts.push(`<line x1="${l}" x2="${w - r}" y1="${py(v).toFixed(1)}" y2="${py(v).toFixed(1)}" stroke="#eee"/>`);
    parts.push(`<text x="${l - 6}" y="${(py(v) + 4).toFixed(1)}" text-anchor="end">${v}</text>`);
  }
  for (const v of ticks(x0, x1)) {
    parts.push(`<text x="${px(v).toFixed(1)}" y="${h - b + 16}" text-anchor="middle">${v}</text>`);
  }
  parts.push(
    `<path d="M${l},${t} V${h - b} H${w - r}" stroke="black" fill="none"/>`,
    `<text x="${(l + w - r) / 2}" y="${h - 8}" text-anchor="middle">${esc(o.xLabel)}</text>`,
    `<text transform="translate(14 ${(t + h - b) / 2}) rotate(-90)" text-anchor="middle">${esc(o.yLabel)}</text>`,
  );
  o.series.forEach((s, i) => {
    const color = PALETTE[(s.color ?? i) % PALETTE.length];
    const dash = s.dashed ? ' stroke-dasharray="5 3"' : '';
    const line = s.points.map(([x, y]) => `${px(x).toFixed(1)},${py(y).toFixed(1)}`).join(' ');
    parts.push(
      `<polyline points="${line}" stroke="${color}" stroke-width="1.6" fill="none" clip-path="url(#plot)"${dash}/>`,
    );
    const ly = t + 6 + i * 16;
    parts.push(
      `<line x1="${w - r + 10}" x2="${w - r + 30}" y1="${ly}" y2="${ly}" stroke="${color}" stroke-width="2"${dash}/>`,
    );
    parts.push(`<text x="${w - r + 34}" y="${ly + 4}">${esc(s.name)}</text>`);
  });
  parts.push('</svg>');
  return parts.join('\n') + '\n';
}

/** A markdown table; numbers are printed with `digits` decimals. */
export function markdownTable(headers: string[], rows: (string | number)[][], digits = 4): string {
  const cell = (
    v: string | number,
  ) => (typeof v === 'number' ? (Number.isInteger(v) ? String(v) : v.toFixed(digits)) : v);
  return [
    `| ${headers.join(' | ')} |`,
    `|${headers.map(() => '---').join('|')}|`,
    ...rows.map((r) => `| ${r.map(cell).join(' | ')} |`),
  ].join('\n') + '\n';
}

/** The same rows as CSV (fields with commas or quotes are quoted). */
export function csv(headers: string[], rows: (string | number)[][]): string {
  const f = (v: string | number) => {
    const s = String(v);
    return /[",\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
  };
  return [headers, ...rows].map((r) => r.map(f).join(',')).join('\n') + '\n';
}
