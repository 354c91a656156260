/**
 * `npm run schedule -- [train flags] [--svg FILE]`: previews the learning rate a training run
 * with the same flags would use — a table at about 20 steps, an ASCII plot and, with --svg,
 * an SVG line chart — without opening a GPU. With `--out DIR --resume` it shows the schedule
 * the resumed run would follow (a re-warm starts at the checkpoint's step and LR).
 */
import { parseTrainArgs, trainHelp } from './args.ts';
import { freshConfig, resolveConfig } from './config_file.ts';
import type { TrainConfig } from '../train/config.ts';
import { lrAt, phaseBoundaries, scheduleFromConfig, type ScheduleSpec, validateSchedule } from '../train/schedules.ts';
import { runCli } from './main.ts';

const fmt = (x: number) => x.toExponential(3);

/** The first step worth showing: a re-warm's steps before its start belong to the old run. */
const firstStep = (
  spec: ScheduleSpec,
  steps: number,
) => (spec.kind === 'rewarm-cosine' ? Math.min(spec.start, steps - 1) : 0);

/** `n` evenly spaced steps from `first` to `last` inclusive. */
const spaced = (first: number, last: number, n: number) =>
  Array.from({ length: n }, (_, i) => first + Math.round((i * (last - first)) / Math.max(1, n - 1)));

/** About 20 evenly spaced steps of a run of `steps`, plus every phase change inside it. */
export function tableSteps(spec: ScheduleSpec, steps: number, n = 20): number[] {
  const first = firstStep(spec, steps);
  const s = new Set(spaced(first, steps - 1, n));
  for (const b of phaseBoundaries(spec)) if (b >= first && b < steps) s.add(b);
  return [...s].sort((a, b) => a - b);
}

/** A `width`×`height` character plot of the LR over the run's steps (0 at the bottom). */
export function asciiPlot(spec: ScheduleSpec, steps: number, width = 64, height = 12): string {
  const first = firstStep(spec, steps);
  const ys = spaced(first, steps - 1, width).map((s) => lrAt(spec, s));
  const top = Math.max(...ys) || 1;
  const grid = Array.from({ length: height }, () => Array(width).fill(' '));
  ys.forEach((y, c) => (grid[height - 1 - Math.min(height - 1, Math.round((y / top) * (height - 1)))][c] = '*'));
  const label = (r: number) => (r === 0 ? fmt(top) : r === height - 1 ? fmt(0) : '').padStart(10);
  const rows = grid.map((row, r) => `${label(r)} |${row.join('')}`);
  rows.push(
    `${''.padStart(10)} +${'-'.repeat(width)}`,
    `${''.padStart(12)}${String(first).padEnd(width / 2)}${String(steps - 1).padStart(width / 2)}`,
  );
  return rows.join('\n');
}

/** An SVG line chart of the LR over the run's steps, with axis labels. */
export function svgChart(spec: ScheduleSpec, steps: number, title: string): string {
  const [w, h, l, r, t, b] = [640, 320, 80, 20, 30, 40];
  const first = firstStep(spec, steps);
  const xs = spaced(first, steps - 1, Math.min(steps - first, 600));
  const top = Math.max(...xs.map((s) => lrAt(spec, s))) || 1;
  const px = (s: number) => l + ((w - l - r) * (s - first)) / Math.max(1, steps - 1 - first);
  const py = (y: number) => h - b - ((h - t - b) * y) / top;
  const pts = xs.map((s) => `${px(s).toFixed(1)},${py(lrAt(spec, s)).toFixed(1)}`).join(' ');
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${w}" height="${h}" font-family="sans-serif" font-size="12">`,
    `<rect width="${w}" height="${h}" fill="white"/>`,
    `<text x="${w / 2}" y="18" text-anchor="middle">${title}</text>`,
    `<path d="M${l},${t} V${h - b} H${w - r}" stroke="black" fill="none"/>`,
    `<text x="${l - 6}" y="${t + 4}" text-anchor="end">${fmt(top)}</text>`,
    `<text x="${l - 6}" y="${h - b + 4}" text-anchor="end">0</text>`,
    `<text x="${l}" y="${h - b + 16}" text-anchor="middle">${first}</text>`,
    `<text x="${w - r}" y="${h - b + 16}" text-anchor="middle">${steps - 1}</text>`,
    `<text x="${(l + w - r) / 2}" y="${h - 6}" text-anchor="middle">step</text>`,
    `<polyline points="${pts}" stroke="#1f77b4" stroke-width="2" fill="none"/>`,
    `</svg>`,
  ].join('\n') + '\n';
}

async function config(args: ReturnType<typeof parseTrainArgs>): Promise<TrainConfig> {
  if (args.resume) return (await resolveConfig(args, args.out ?? '')).cfg;
  return freshConfig(args);
}

/** Runs the CLI; returns the text it printed. */
export async function main(argv: string[]): Promise<string> {
  const args = parseTrainArgs(argv, { svg: { type: 'string' } });
  if (args.help) {
    const help = 'npm run schedule -- [train flags] [--svg FILE]   preview the LR schedule of a run\n' +
      '  --svg FILE           also write an SVG line chart\n\n' + trainHelp();
    console.log(help);
    return help;
  }
  const cfg = await config(args);
  const spec = scheduleFromConfig(cfg);
  validateSchedule(spec, cfg.steps);
  const params = Object.entries(spec).filter(([k]) => k !== 'kind').map(([k, v]) => `${k} ${v}`).join(' · ');
  const lines = [`schedule ${spec.kind} · ${params} · run of ${cfg.steps} steps`];
  lines.push(`phase changes at steps ${phaseBoundaries(spec).join(', ')}`, '', '   step  lr');
  for (const s of tableSteps(spec, cfg.steps)) lines.push(`${String(s).padStart(7)}  ${fmt(lrAt(spec, s))}`);
  lines.push('', asciiPlot(spec, cfg.steps));
  const svg = args.extra.svg as string | undefined;
  if (svg) {
    await Deno.writeTextFile(svg, svgChart(spec, cfg.steps, `${spec.kind} learning rate over ${cfg.steps} steps`));
    lines.push('', `wrote ${svg}`);
  }
  const text = lines.join('\n');
  console.log(text);
  return text;
}

if (import.meta.main) await runCli(main);
