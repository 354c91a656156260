/**
 * The charts of the Training panel: train loss per step and validation loss at evaluations
 * ({@link LossChart}) and one-series charts such as tokens/s ({@link SeriesChart}), drawn with uPlot
 * (a small canvas chart library). The log table beside it carries the same numbers as text.
 */
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';

const STEP_TICKS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000, 20_000, 50_000, 100_000];

export class LossChart {
  private readonly plot: uPlot;
  private steps: number[] = [];
  private train: (number | null)[] = [];
  private val: (number | null)[] = [];
  private pending = false;
  private readonly resize: ResizeObserver;

  /** `host` receives the chart; `placeholder` (if any) shows while there is no data. */
  constructor(host: HTMLElement, private readonly placeholder: HTMLElement | null = null) {
    const css = getComputedStyle(document.documentElement);
    const trainColor = css.getPropertyValue('--train').trim() || '#2563eb';
    const valColor = css.getPropertyValue('--val').trim() || '#dc2626';
    const axisColor = css.getPropertyValue('--muted').trim() || '#555';
    const axis: uPlot.Axis = { stroke: axisColor, grid: { stroke: 'rgba(127,127,127,0.18)' }, ticks: { stroke: 'rgba(127,127,127,0.3)' } };
    this.plot = new uPlot(
      {
        width: Math.max(200, host.clientWidth),
        height: Math.max(120, host.clientHeight - 30),
        scales: { x: { time: false } },
        series: [
          { label: 'step' },
          { label: 'train loss', stroke: trainColor, width: 1.5, spanGaps: true, points: { show: false } },
          { label: 'val loss', stroke: valColor, width: 2, spanGaps: true, points: { show: true, size: 6, fill: valColor } },
        ],
        // Steps are whole numbers: no 0.2-step ticks on short runs.
        axes: [{ ...axis, label: 'step', incrs: STEP_TICKS }, { ...axis, label: 'loss', size: 52 }],
        legend: { live: false }, // the metric cards and the log carry the numbers
        cursor: { drag: { x: false, y: false } },
      },
      [[], [], []],
      host,
    );
    this.resize = new ResizeObserver(() => {
      this.plot.setSize({ width: Math.max(200, host.clientWidth), height: Math.max(120, host.clientHeight - 30) });
    });
    this.resize.observe(host);
  }

  reset(): void {
    this.steps = [];
    this.train = [];
    this.val = [];
    this.redraw();
  }

  /** Adds train losses [(step, loss)]; steps arrive in increasing order. */
  addTrain(points: [number, number][]): void {
    for (const [s, l] of points) {
      this.steps.push(s);
      this.train.push(l);
      this.val.push(null);
    }
    this.schedule();
  }

  /** Adds a validation loss at `step` (on the last train point with that step, or a new point). */
  addVal(step: number, loss: number): void {
    const i = this.steps.lastIndexOf(step);
    if (i >= 0) this.val[i] = loss;
    else {
      this.steps.push(step);
      this.train.push(null);
      this.val.push(loss);
    }
    this.schedule();
  }

  private schedule(): void {
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => {
      this.pending = false;
      this.redraw();
    });
  }

  private redraw(): void {
    if (this.placeholder) this.placeholder.hidden = this.steps.length > 0;
    this.plot.setData([this.steps, this.train, this.val] as uPlot.AlignedData);
  }
}

/**
 * A one-series line chart by step (tokens per second, ms per step), drawn with uPlot like
 * {@link LossChart}. Points arrive in step order; `reset` clears them.
 */
export class SeriesChart {
  private readonly plot: uPlot;
  private x: number[] = [];
  private y: number[] = [];
  private pending = false;

  /** `label` names the series and its axis; `colour` is a CSS colour. */
  constructor(host: HTMLElement, label: string, colour = '#16a34a') {
    const css = getComputedStyle(document.documentElement);
    const axisColor = css.getPropertyValue('--muted').trim() || '#555';
    const axis: uPlot.Axis = { stroke: axisColor, grid: { stroke: 'rgba(127,127,127,0.18)' }, ticks: { stroke: 'rgba(127,127,127,0.3)' } };
    const size = () => ({ width: Math.max(160, host.clientWidth), height: Math.max(90, host.clientHeight - 30) });
    this.plot = new uPlot(
      {
        ...size(),
        scales: { x: { time: false } },
        series: [{ label: 'step' }, { label, stroke: colour, width: 1.5, points: { show: false } }],
        axes: [{ ...axis, label: 'step', incrs: STEP_TICKS }, { ...axis, label, size: 60 }],
        legend: { live: false },
        cursor: { drag: { x: false, y: false } },
      },
      [[], []],
      host,
    );
    new ResizeObserver(() => this.plot.setSize(size())).observe(host);
  }

  reset(): void {
    this.x = [];
    this.y = [];
    this.plot.setData([[], []]);
  }

  /** Appends (step, value) points. */
  add(points: [number, number][]): void {
    for (const [s, v] of points) {
      this.x.push(s);
      this.y.push(v);
    }
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => {
      this.pending = false;
      this.plot.setData([this.x, this.y]);
    });
  }
}
