/**
 * The Plan explorer tab (docs/design.md#a-performance-model-that-chooses-the-plan): choose a model (a paper-scale
 * preset or custom dimensions) and a cluster (world size, device profile, network), and the performance model's search
 * (plan_explore.ts, in plan_worker.ts off the main thread) ranks every plan that fits; the top ten show as stacked time
 * and memory bars (plan_bars.ts) under the one line on why the best wins. Selecting a plan shows how it scales down to
 * the demo's tiny model (plan_scale.ts), and the button hands those Setup values to the page, which fills the Setup and
 * starts its ordinary parallel run (src/app/main.ts): no second trainer path.
 */
import { NET_PRESETS } from '../../comm/network.ts';
import { describePlan } from '../../parallel/plan/plan.ts';
import { DEVICE_PROFILES } from '../../perf/device_profile.ts';
import { MODEL_PRESETS } from '../../perf/model_presets.ts';
import { legend, MEMORY_LEGEND, planRow, TIME_LEGEND } from './plan_bars.ts';
import type { ExplorerResult, ExplorerRow, ExplorerSpec } from './plan_explore.ts';
import { MAX_SCALED_WORLD, type ScaledRun, scaleDown } from './plan_scale.ts';

/** Starts a scaled-down run through the page's Setup; resolves to null, or why it could not start. */
export type StartRun = (run: ScaledRun, steps: number, net: string) => string | null;

const CUSTOM_DIMS = 'layers=12,heads=12,hidden=768,seq=1024,vocab=50257,batch=512';
const opts = (values: string[], chosen: string) => values.map((v) => `<option value="${v}"${v === chosen ? ' selected' : ''}>${v}</option>`).join('');

/** The tab: controls, the ranked plans and the scaled-down run. */
export class PlanExplorer {
  private readonly q: <T extends HTMLElement = HTMLElement>(id: string) => T;
  private worker: Worker | null = null;
  private asked = 0;
  private rows: ExplorerRow[] = [];
  private selected: ExplorerRow | null = null;
  private scaled: ScaledRun | null = null;
  /** The run going on (or last ended) was started here; `pending`: the button was just pressed. */
  private started = false;
  private pending = false;
  private busy = false;

  /** Builds the tab inside `host`; `start` is the page's way to run a scaled-down plan. */
  constructor(private readonly host: HTMLElement, private readonly start: StartRun) {
    host.innerHTML = `
      <p class="summary">The performance model (<code>npm run plan -- --search</code>) ranks every dp × tp × pp × cp × ZeRO ×
      micro-batch × schedule × recompute plan that fits the device, by predicted step time. Pick a model and a cluster.</p>
      <form class="toolbar px-controls" data-testid="px-form">
        <label>Model <select data-testid="px-model" id="px-model">${opts([...Object.keys(MODEL_PRESETS), 'custom'], 'megatron-1.7b')}</select></label>
        <label hidden>Dimensions <input data-testid="px-dims" id="px-dims" size="44" value="${CUSTOM_DIMS}" spellcheck="false"></label>
        <label>Global batch <input data-testid="px-batch" id="px-batch" size="6" inputmode="numeric" placeholder="preset"></label>
        <label>GPUs <input data-testid="px-world" id="px-world" size="6" inputmode="numeric" value="8"></label>
        <label>Device <select data-testid="px-device" id="px-device">${opts(Object.keys(DEVICE_PROFILES), 'h100-sxm')}</select></label>
        <label>Network <select data-testid="px-net" id="px-net">${opts([...Object.keys(NET_PRESETS), 'custom'], 'nvlink-ib')}</select></label>
        <label hidden>Links <input data-testid="px-net-text" id="px-net-text" size="40" value="intra=300GB/s,1us;inter=25GB/s,5us;node=8" spellcheck="false"></label>
        <label>Precision <select data-testid="px-dtype" id="px-dtype">${opts(['bf16', 'f32'], 'bf16')}</select></label>
        <label>Attention <select data-testid="px-attention" id="px-attention">${opts(['flash', 'naive'], 'flash')}</select></label>
        <button type="submit" class="primary" data-testid="px-search">Search plans</button>
      </form>
      <p class="summary" data-testid="px-status" role="status">Press Search plans.</p>
      <div class="config-errors" data-testid="px-error" role="alert" hidden></div>
      <p class="caption" data-testid="px-why" hidden></p>
      <div class="px-run" data-testid="px-run" hidden>
        <p class="summary" data-testid="px-scale"></p>
        <ul class="px-changes" data-testid="px-changes"></ul>
        <div class="toolbar">
          <label>Steps <input data-testid="px-steps" id="px-steps" size="5" inputmode="numeric" value="20"></label>
          <button type="button" class="primary" data-testid="px-start">Train the scaled-down plan</button>
        </div>
        <p class="summary" data-testid="px-run-status" role="status"></p>
      </div>
      <div class="px-legends"></div>
      <div class="px-list" role="radiogroup" aria-label="Ranked plans, fastest first" data-testid="px-plans"></div>
      `;
    this.q = <T extends HTMLElement>(id: string) => host.querySelector<T>(`[data-testid="${id}"]`)!;
    host.querySelector('.px-legends')!.append(legend(TIME_LEGEND, 'time'), legend(MEMORY_LEGEND, 'mem'));
    const form = this.q<HTMLFormElement>('px-form');
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      this.search();
    });
    form.addEventListener('change', () => {
      this.q('px-dims').parentElement!.hidden = this.value('px-model') !== 'custom';
      this.q('px-net-text').parentElement!.hidden = this.value('px-net') !== 'custom';
    });
    const list = this.q('px-plans');
    list.addEventListener('click', (e) => {
      const row = (e.target as HTMLElement).closest<HTMLElement>('.px-row');
      if (row) this.select(Number(row.dataset.rank));
    });
    list.addEventListener('keydown', (e) => {
      const step = e.key === 'ArrowDown' || e.key === 'ArrowRight' ? 1 : e.key === 'ArrowUp' || e.key === 'ArrowLeft' ? -1 : 0;
      if (!step || !this.selected) return;
      e.preventDefault();
      this.select(Math.min(this.rows.length, Math.max(1, this.selected.rank + step)), true);
    });
    this.q('px-start').addEventListener('click', () => this.run());
  }

  /** Runs the first search when the tab is first shown. */
  show(): void {
    if (!this.asked) this.search();
  }

  /** The page's run state: while a run goes on nothing starts here; a run this tab asked for mirrors its status here. */
  setRunning(running: boolean): void {
    if (running && !this.busy) this.started = this.pending;
    this.pending = false;
    this.busy = running;
    this.q<HTMLButtonElement>('px-start').disabled = running || !this.scaled;
  }

  /** The Training view's status line, shown under the button while (and after) a run this tab started. */
  status(text: string): void {
    if (this.started) this.q('px-run-status').textContent = text;
  }

  private value(id: string): string {
    return this.q<HTMLInputElement>(id).value.trim();
  }

  private spec(): ExplorerSpec {
    const custom = this.value('px-model') === 'custom', batch = this.value('px-batch');
    const net = this.value('px-net');
    return {
      model: custom ? this.value('px-dims') : this.value('px-model'),
      world: Number(this.value('px-world')),
      device: this.value('px-device'),
      net: net === 'custom' ? this.value('px-net-text') : net,
      dtype: this.value('px-dtype') as ExplorerSpec['dtype'],
      attention: this.value('px-attention') as ExplorerSpec['attention'],
      ...(batch ? { globalBatch: Number(batch) } : {}),
    };
  }

  /** Sends the spec to the worker; a later search overtakes an earlier one. */
  search(): void {
    const spec = this.spec(), id = ++this.asked;
    if (spec.globalBatch !== undefined && !(Number.isInteger(spec.globalBatch) && spec.globalBatch >= 1)) {
      return this.render({ ok: false, message: `global batch must be a whole number ≥ 1, got '${this.value('px-batch')}'`, noFit: false });
    }
    this.q('px-status').textContent = `Searching every plan on ${spec.world} × ${spec.device}${spec.world > 256 ? ' (a few seconds at this size)' : ''}…`;
    this.host.dataset.searching = 'true';
    if (!this.worker) {
      this.worker = new Worker(new URL('../plan_worker.ts', import.meta.url), { type: 'module', name: 'plan-search' });
      this.worker.addEventListener('message', (e: MessageEvent<{ id: number; result: ExplorerResult }>) => {
        if (e.data.id === this.asked) this.render(e.data.result);
      });
      this.worker.addEventListener('error', (e) => this.render({ ok: false, message: `the search worker failed: ${e.message}`, noFit: false }));
    }
    this.worker.postMessage({ id, spec });
  }

  /** Draws a result: the rows and the first selected, or the reason there are none. */
  private render(r: ExplorerResult): void {
    delete this.host.dataset.searching;
    const error = this.q('px-error'), why = this.q('px-why'), list = this.q('px-plans');
    this.rows = r.ok ? r.rows : [];
    error.hidden = r.ok;
    why.hidden = !r.ok;
    if (!r.ok) {
      error.textContent = r.noFit ? `No plan fits: ${r.message}` : `Cannot search: ${r.message}`;
      error.dataset.kind = r.noFit ? 'no-fit' : 'input';
      this.q('px-status').textContent = r.noFit ? 'The search found no plan to rank.' : 'Fix the model or cluster above.';
      list.replaceChildren();
      this.selected = this.scaled = null;
      this.q('px-run').hidden = true;
      this.host.dataset.plans = '0';
      return;
    }
    const n = (x: number) => x.toLocaleString('en-US'), m = r.model;
    const params = r.params >= 1e9 ? `${(r.params / 1e9).toFixed(1)}B` : `${(r.params / 1e6).toFixed(1)}M`;
    this.q('px-status').textContent = `${m.name}: ${m.nLayer} layers · ${m.nHead} heads · hidden ${m.nEmbd} · seq ${m.blockSize} · ${params} parameters · ` +
      `global batch ${m.batchSize} on ${r.world} × ${r.device} — ${n(r.enumerated)} plans enumerated, ${n(r.valid)} valid, ` +
      `${n(r.overMemory)} over memory dropped, ${n(r.ranked)} ranked in ${(r.ms / 1e3).toFixed(2)} s` +
      (r.thinned ? ` (micro-batch counts thinned to ${r.thinned.kept} of up to ${r.thinned.most} per split to bound the work)` : '') +
      `; the top ${r.rows.length}:`;
    why.textContent = `${r.order}. ${r.why}`;
    const scale = Math.max(...r.rows.map((x) => x.step));
    list.replaceChildren(...r.rows.map((row) => planRow(row, scale, r.deviceMemory)));
    this.host.dataset.plans = String(r.rows.length);
    this.select(1);
  }

  /** Marks plan `rank` selected and shows how it scales down. */
  private select(rank: number, focus = false): void {
    this.selected = this.rows.find((x) => x.rank === rank) ?? null;
    for (const el of this.q('px-plans').querySelectorAll<HTMLElement>('.px-row')) {
      const on = Number(el.dataset.rank) === rank;
      el.setAttribute('aria-checked', String(on));
      el.tabIndex = on ? 0 : -1;
      if (on && focus) el.focus();
    }
    const box = this.q('px-run'), note = this.q('px-scale'), changes = this.q('px-changes'), button = this.q<HTMLButtonElement>('px-start');
    box.hidden = !this.selected;
    if (!this.selected) return;
    try {
      this.scaled = scaleDown(this.selected.plan, this.selected.recompute);
    } catch (e) {
      this.scaled = null;
      note.textContent = `Plan ${rank} cannot be scaled down: ${(e as Error).message}`;
      changes.replaceChildren();
      button.disabled = true;
      return;
    }
    const s = this.scaled, t = s.model, exact = !s.changes.length;
    const where = `the tiny model (${t.nLayer} layer${t.nLayer > 1 ? 's' : ''} · ${t.nHead} heads · width ${t.nEmbd} · context ${t.blockSize} · global batch ${t.batchSize}) on ${s.world} rank worker${s.world > 1 ? 's' : ''}`;
    note.textContent = exact
      ? `Plan ${rank} runs as chosen on ${where}: ${describePlan(s.plan)} · recompute ${s.recompute}.`
      : `Plan ${rank} cannot run as chosen in this tab (at most ${MAX_SCALED_WORLD} ranks); the nearest plan that can: ${describePlan(s.plan)} · recompute ${s.recompute}, on ${where}. What changed:`;
    note.dataset.exact = String(exact);
    changes.replaceChildren(...s.changes.map((c) => Object.assign(document.createElement('li'), { textContent: c })));
    button.textContent = exact ? 'Train the scaled-down plan' : 'Train the nearest plan';
    button.disabled = this.busy;
  }

  private run(): void {
    const steps = Number(this.value('px-steps')), status = this.q('px-run-status');
    if (!this.scaled || this.busy) return;
    if (!Number.isInteger(steps) || steps < 1) {
      status.textContent = `Steps must be a whole number ≥ 1, got '${this.value('px-steps')}'.`;
      return;
    }
    this.pending = true;
    status.textContent = 'Filling the Setup with the plan and starting (follow it in the Training, Timeline and Memory tabs)…';
    const why = this.start(this.scaled, steps, this.spec().net);
    this.pending = false;
    if (why) status.textContent = `Cannot start: ${why}`;
  }
}
