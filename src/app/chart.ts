/**
 * The loss chart: train loss per step and validation loss at evaluations, drawn with uPlot
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
