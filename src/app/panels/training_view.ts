/**
 * The Training panel's outputs: metric cards, the loss chart (train and validation), the
 * tokens/s chart, the log (one line per logged step, whose `data-loss` the e2e tests read) and
 * the sample box. Live runs and opened metrics.jsonl files feed it the same records.
 */
import { LossChart, SeriesChart } from '../chart.ts';
import type { StepRecord } from './trace_io.ts';

const MAX_LOG_LINES = 1000;

export const fmt = {
  loss: (x: number) => x.toFixed(4),
  lr: (x: number) => x.toExponential(2),
  ms: (x: number) => (x >= 100 ? x.toFixed(0) : x.toFixed(1)),
  tps: (x: number) => String(Math.round(x)),
  step: (s: number) => String(s).padStart(5),
};

const $ = (sel: string) => document.querySelector<HTMLElement>(sel)!;

/** The Training view over the elements of index.html (#chart, #tps-chart, #log, #sample, metric cards). */
export class TrainingView {
  readonly loss = new LossChart($('#chart'), $('#chart-empty'));
  readonly tps = new SeriesChart($('#tps-chart'), 'tokens/s');
  private readonly log = $('#log');
  readonly sample = $('#sample');
  private readonly cards = { step: $('#m-step'), loss: $('#m-loss'), val: $('#m-val'), ms: $('#m-ms'), tps: $('#m-tps') };

  /** Appends a log line; `data` becomes data-* attributes. Keeps the view at the bottom unless scrolled up. */
  line(text: string, cls = '', data: Record<string, string> = {}): void {
    const row = document.createElement('div');
    row.className = `line ${cls}`.trim();
    row.textContent = text;
    Object.assign(row.dataset, data);
    const stick = this.log.scrollTop + this.log.clientHeight >= this.log.scrollHeight - 4;
    this.log.append(row);
    while (this.log.childElementCount > MAX_LOG_LINES) this.log.firstElementChild!.remove();
    if (stick) this.log.scrollTop = this.log.scrollHeight;
  }

  /** One train record into the cards, the tokens/s chart and the log (the loss chart takes points separately). */
  step(r: StepRecord, total?: number): void {
    const c = this.cards;
    c.step.textContent = `${r.step + 1}${total ? ` / ${total}` : ''}`;
    c.loss.textContent = fmt.loss(r.loss);
    if (r.ms !== undefined) c.ms.textContent = fmt.ms(r.ms);
    if (r.tokensPerSec !== undefined) {
      c.tps.textContent = fmt.tps(r.tokensPerSec);
      this.tps.add([[r.step, r.tokensPerSec]]);
    }
    const extra = `${r.lr !== undefined ? ` | lr ${fmt.lr(r.lr)}` : ''}${r.ms !== undefined ? ` | ${fmt.ms(r.ms)} ms/step` : ''}` +
      `${r.tokensPerSec !== undefined ? ` | ${fmt.tps(r.tokensPerSec)} tokens/s` : ''}`;
    this.line(`step ${fmt.step(r.step)} | loss ${fmt.loss(r.loss)}${extra}`, 'train', { step: String(r.step), loss: String(r.loss) });
  }

  /** A validation loss at `step`. */
  val(step: number, valLoss: number): void {
    this.loss.addVal(step, valLoss);
    this.cards.val.textContent = fmt.loss(valLoss);
    this.line(`step ${fmt.step(step)} | val loss ${fmt.loss(valLoss)}`, 'eval', { step: String(step), valLoss: String(valLoss) });
  }

  /** Empties charts, cards, log and sample for a new run. */
  clear(): void {
    this.loss.reset();
    this.tps.reset();
    this.log.replaceChildren();
    this.sample.textContent = '';
    for (const m of Object.values(this.cards)) m.textContent = '–';
  }
}
