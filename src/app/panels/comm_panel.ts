/**
 * The Communication panel: a rank×rank heatmap of the bytes each rank sent to each other rank
 * (rows: sender, columns: receiver; from the trace's send spans via `traceTotals`), and the
 * bytes per collective measured beside the prediction, summed over every rank and the traced steps: each rank's step
 * counted from the model (perf/compression_report.ts rankStepTraffic) when the run's config is known, else the
 * analytical model of a GPT of its shape (src/parallel/cost/cost.ts stepTraffic). A plan that compresses
 * adds its bytes per parallel dimension, raw and compressed, beside the measured (comm_compression.ts).
 */
import { type Span, traceTotals } from '../../comm/trace.ts';
import { type ParallelPlan, type PlanModel, planWorldSize } from '../../parallel/plan/plan.ts';
import { stepTraffic } from '../../parallel/cost/cost.ts';
import type { TrainConfig } from '../../train/config.ts';
import { compressionBytes, type CountedRows, type DimBytes, trafficOptions } from './comm_compression.ts';
import { fmtBytes } from './trace_io.ts';
import { outerSyncStats } from './outer_view.ts';

/** What the prediction needs: the plan, the model and how many optimizer steps the trace covers. */
export interface Prediction {
  plan: ParallelPlan;
  model: PlanModel;
  steps: number;
  /** The run's config (its trainer's options). */
  cfg?: TrainConfig;
  /** Every rank's step counted from the model (views.ts derives them); absent, the analytical model of the shape. */
  rows?: CountedRows;
}

/**
 * Predicted bytes per call op (`allReduce`, `send`, …) for `steps` optimizer steps of the
 * plan, summed over every rank: Σ_rank Σ_rows 4·elements (f32).
 * @throws Error from stepTraffic when the plan is invalid for the model, or no rows are given for a model that is not a GPT.
 */
export function predictedBytesByOp(p: Prediction): Record<string, number> {
  const out: Record<string, number> = {};
  for (let r = 0; r < planWorldSize(p.plan); r++) {
    const rows = p.rows?.packed[r] ?? stepTraffic(p.plan, p.model, r, trafficOptions(p.plan, p.cfg));
    for (const row of rows) out[row.collective] = (out[row.collective] ?? 0) + 4 * row.elements * p.steps;
  }
  return out;
}

/** The Communication view: heatmap and per-collective table, rebuilt by {@link CommPanel.update}. */
export class CommPanel {
  private readonly heat: HTMLElement;
  private readonly table: HTMLElement;
  private readonly note: HTMLElement;
  private readonly summary: HTMLElement;
  private readonly compress: HTMLElement;

  constructor(host: HTMLElement) {
    host.innerHTML = `
      <p class="summary" data-testid="comm-summary">No traffic yet: start a run with more than one rank, or open a run.</p>
      <div class="comm-grid">
        <figure><figcaption>Bytes sent, rank → rank (row sends to column)</figcaption><div data-testid="comm-heatmap"></div></figure>
        <figure><figcaption>Per collective: measured (trace) vs predicted (the model's own step)</figcaption><div data-testid="comm-totals"></div>
        <p class="hint" data-slot="note"></p></figure>
      </div>
      <figure class="comm-compress" data-slot="compress" hidden><figcaption>Compression per dimension: raw vs compressed bytes (the step without and
        with the plan's policy, every rank) and measured (trace sends inside training steps)</figcaption>
        <div data-testid="comm-compress"></div><p class="hint" data-slot="compress-note"></p></figure>`;
    this.heat = host.querySelector('[data-testid="comm-heatmap"]')!;
    this.table = host.querySelector('[data-testid="comm-totals"]')!;
    this.note = host.querySelector('[data-slot="note"]')!;
    this.summary = host.querySelector('[data-testid="comm-summary"]')!;
    this.compress = host.querySelector('[data-slot="compress"]')!;
  }

  /**
   * Before any traffic: the plan's compression figures for one step, predicted only (hidden when
   * it compresses nothing), so the Setup's policy shows its effect before a run.
   */
  preview(p: Omit<Prediction, 'steps'>): void {
    this.showCompression({ ...p, steps: 1 });
  }

  /** Shows the traffic of `spans`; with `prediction`, the analytical bytes beside it. */
  update(spans: readonly Span[], prediction?: Prediction): void {
    const t = traceTotals(spans);
    const ranks = [...new Set(spans.map((s) => s.rank))].sort((a, b) => a - b);
    const n = ranks.length ? Math.max(...ranks) + 1 : 0;
    const outer = outerSyncStats(spans);
    this.summary.textContent = n ? `${fmtBytes(t.totalBytes)} sent by ${n} ranks in ${Object.values(t.messagesByOp).reduce((a, b) => a + b, 0)} messages` : 'No traffic yet.';
    // Low-communication runs (--sync): the outer allReduces' share, from their group.
    if (n && outer) this.summary.textContent += `; outer synchronisation ${fmtBytes(outer.bytes)} in ${outer.calls} calls on ${outer.groups.join(', ')}`;
    this.summary.dataset.outerBytes = String(outer?.bytes ?? 0);
    this.heat.replaceChildren(this.heatmap(t.bytesByPair, n));
    let predicted: Record<string, number> = {};
    this.note.textContent = '';
    if (prediction) {
      try {
        predicted = predictedBytesByOp(prediction);
        this.note.textContent = `Prediction: ${prediction.steps} step(s) of the plan, every rank, f32 (4 bytes per element). ` +
          'Traffic outside the training steps (evaluation, parameter broadcast) is measured but not predicted.';
      } catch (e) {
        this.note.textContent = `No prediction: ${(e as Error).message}`;
      }
    }
    this.table.replaceChildren(this.totals(t.bytesByOp, t.messagesByOp, predicted));
    this.showCompression(prediction, spans);
  }

  /** The compression table of `p` (with `spans`, measured beside it); hidden without a compressing plan. */
  private showCompression(p: Prediction | undefined, spans?: readonly Span[]): void {
    let rows: DimBytes[] = [], note = '';
    try {
      rows = p ? compressionBytes(p, spans) : [];
    } catch (e) {
      note = `No compression figures: ${(e as Error).message}`;
    }
    this.compress.hidden = !rows.length && !note;
    if (this.compress.hidden) return;
    this.compress.querySelector('[data-slot="compress-note"]')!.textContent = note ||
      `${p!.steps} step(s); ≈ marks an estimate (PowerSGD without the run's config).` +
        (spans ? '' : ' Measured bytes appear once a run has traffic.');
    const tbl = document.createElement('table');
    tbl.className = 'totals';
    const head = tbl.createTHead().insertRow();
    for (const h of ['dim', 'scheme', 'raw', 'compressed', 'ratio', 'measured', 'measured / compressed']) head.insertCell().textContent = h;
    const body = tbl.createTBody();
    for (const d of rows) {
      const row = body.insertRow();
      Object.assign(row.dataset, { dim: d.dim, scheme: d.scheme, raw: String(d.raw), compressed: String(d.compressed), measured: String(d.measured ?? '') });
      const m = d.measured;
      for (
        const v of [d.dim, d.scheme, fmtBytes(d.raw), `${d.exact ? '' : '≈'}${fmtBytes(d.compressed)}`, d.compressed ? `${(d.raw / d.compressed).toFixed(2)}×` : '—',
          m === null ? '—' : fmtBytes(m), m !== null && d.compressed ? (m / d.compressed).toFixed(3) : '—']
      ) row.insertCell().textContent = v;
    }
    this.compress.querySelector('[data-testid="comm-compress"]')!.replaceChildren(tbl);
  }

  private heatmap(pairs: Record<string, number>, n: number): HTMLElement {
    const tbl = document.createElement('table');
    tbl.className = 'heatmap';
    const max = Math.max(1, ...Object.values(pairs));
    const head = tbl.createTHead().insertRow();
    head.insertCell().textContent = 'from \\ to';
    for (let j = 0; j < n; j++) head.insertCell().textContent = String(j);
    const body = tbl.createTBody();
    for (let i = 0; i < n; i++) {
      const row = body.insertRow();
      const th = document.createElement('th');
      th.textContent = String(i);
      row.append(th);
      for (let j = 0; j < n; j++) {
        const b = pairs[`${i}>${j}`] ?? 0, cell = row.insertCell();
        const f = b / max;
        cell.textContent = b ? fmtBytes(b) : i === j ? '—' : '0';
        cell.dataset.bytes = String(b);
        cell.style.background = b ? `rgba(245, 158, 11, ${0.12 + 0.78 * f})` : '';
        cell.style.color = f > 0.6 ? '#111' : '';
        cell.title = `rank ${i} → rank ${j}: ${b} bytes`;
      }
    }
    return tbl;
  }

  private totals(bytes: Record<string, number>, msgs: Record<string, number>, predicted: Record<string, number>): HTMLElement {
    const tbl = document.createElement('table');
    tbl.className = 'totals';
    const head = tbl.createTHead().insertRow();
    for (const h of ['collective', 'messages', 'measured', 'predicted', 'measured / predicted']) head.insertCell().textContent = h;
    const body = tbl.createTBody();
    for (const op of [...new Set([...Object.keys(bytes), ...Object.keys(predicted)])].sort()) {
      const row = body.insertRow();
      row.dataset.op = op;
      const m = bytes[op] ?? 0, p = predicted[op];
      for (const v of [op, String(msgs[op] ?? 0), fmtBytes(m), p === undefined ? '—' : fmtBytes(p), p ? (m / p).toFixed(3) : '—']) {
        row.insertCell().textContent = v;
      }
    }
    return tbl;
  }
}
