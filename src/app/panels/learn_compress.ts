/**
 * Learn: compressed allReduce with error feedback (docs/design.md#compressed-collectives-and-the-per-dimension-policy),
 * replayed from a real traced call. "Run" performs LESSON.steps compressed allReduces of a fixed, drifting input on the
 * page's GPU (compress_run.ts) and the lesson steps through them: per value, each rank's input, what it sent (decoded
 * from its words), the residual error feedback kept, and the result; the words on the wire come from the trace's send
 * spans, and the invariant line adds up the measured values (compress_replay.ts `invariantAfter`).
 */
import { type CompressStep, invariantAfter, LESSON, rawWords } from './compress_replay.ts';

const SCHEMES: [string, string][] = [['topk:0.1', 'top-k, 10 % of each chunk'], ['sign', 'sign (1 bit a value + a scale)']];

const fix = (v: number) => (Object.is(v, -0) ? 0 : v).toFixed(4);

/** The compression lesson: runs the traced calls on demand and steps through them. */
export class CompressLesson {
  private steps: CompressStep[] = [];
  private scheme = SCHEMES[0][0];
  private at = 0;
  private readonly board: HTMLElement;
  private readonly caption: HTMLElement;
  private readonly invariant: HTMLElement;
  private readonly slider: HTMLInputElement;
  private readonly prev: HTMLButtonElement;
  private readonly next: HTMLButtonElement;

  /** `run(scheme)` performs the real compressed allReduces and resolves to their steps. */
  constructor(host: HTMLElement, private readonly run: (scheme: string) => Promise<CompressStep[]>) {
    const { p, n, steps } = LESSON;
    host.innerHTML = `
      <p>A compressed allReduce sends far fewer words, but top-k drops most values and sign keeps one bit of each.
      <b>Error feedback</b> keeps what was dropped as a per-rank <b>residual</b> e and adds it to the next call's input
      under the same name, as the dp gradient sync does each step: nothing is lost, only delayed. The call runs in two
      phases (1-bit Adam's): each rank compresses x + e₁ and sends chunk j to rank j (allToAll); rank j sums its chunk,
      compresses it with its own residual e₂, and everyone gathers the result (allGather).</p>
      <div class="toolbar">
        <label>Scheme <select data-testid="cmp-scheme">${SCHEMES.map(([v, t]) => `<option value="${v}">${t}</option>`).join('')}</select></label>
        <button type="button" class="primary" data-testid="cmp-run">Run ${steps} traced compressed allReduces</button>
        <button type="button" data-act="prev" data-testid="cmp-prev" disabled>◀ Step back</button>
        <label>Step <input type="range" min="1" max="${steps}" value="1" data-testid="cmp-step" disabled></label>
        <button type="button" data-act="next" data-testid="cmp-next" disabled>Step ▶</button>
      </div>
      <p class="caption" data-testid="cmp-caption" aria-live="polite">Press “Run”: ${p} ranks on this page's GPU each
      reduce ${n} values, ${steps} times, and you step through what they sent and what they still owe.</p>
      <p class="hint cmp-invariant" data-testid="cmp-invariant"></p>
      <p class="hint">Columns per value i: x, rank r's input; sent, decoded from the words rank r sent (chunk j went to rank j;
      framed: a value that got through); e₁, what rank r still owes; output, the allReduce's result on every rank; e₂, what
      the chunk's owner still owes from phase 2.</p>
      <div class="cmp-board" data-testid="cmp-board"></div>`;
    this.board = host.querySelector('.cmp-board')!;
    this.caption = host.querySelector('.caption')!;
    this.invariant = host.querySelector('[data-testid="cmp-invariant"]')!;
    this.slider = host.querySelector('input[type="range"]')!;
    this.prev = host.querySelector('[data-act="prev"]')!;
    this.next = host.querySelector('[data-act="next"]')!;
    const runBtn = host.querySelector<HTMLButtonElement>('[data-testid="cmp-run"]')!;
    const sel = host.querySelector<HTMLSelectElement>('select')!;
    runBtn.addEventListener('click', async () => {
      runBtn.disabled = true;
      this.caption.textContent = `Opening the GPU and running ${steps} compressed allReduces on ${p} ranks…`;
      try {
        this.scheme = sel.value;
        this.steps = await this.run(this.scheme);
        this.go(1);
      } catch (e) {
        this.caption.textContent = `The run failed: ${(e as Error).message}`;
      } finally {
        runBtn.disabled = false;
      }
    });
    this.prev.addEventListener('click', () => this.go(this.at - 1));
    this.next.addEventListener('click', () => this.go(this.at + 1));
    this.slider.addEventListener('input', () => this.go(Number(this.slider.value)));
  }

  /** Shows step `k` (1-based) and the invariant through it. */
  private go(k: number): void {
    const total = this.steps.length;
    if (!total) return;
    this.at = Math.max(1, Math.min(total, k));
    this.slider.disabled = false;
    this.slider.value = String(this.at);
    this.prev.disabled = this.at === 1;
    this.next.disabled = this.at === total;
    const s = this.steps[this.at - 1], { p, n } = LESSON, c = Math.ceil(n / p);
    this.board.dataset.step = String(this.at);
    this.board.replaceChildren(this.table(s, c));
    const w = s.words.map((x, r) => `rank ${r} ${x.total} (${x.allToAll} allToAll + ${x.allGather} allGather)`).join(', ');
    this.caption.textContent = `Step ${this.at} of ${total} (${this.scheme}): each rank compressed its input plus the residual it ` +
      `carried, chunk j for rank j. Words on the wire, from the trace: ${w}; an uncompressed allReduce sends ` +
      `${rawWords(n, p)} per rank. Framed: the values that got through; the residual columns hold the rest.`;
    const inv = invariantAfter(this.steps, this.at);
    const gap = Object.assign(document.createElement('b'), { textContent: inv.gap.toExponential(1), title: 'f32 rounding' });
    this.invariant.replaceChildren(
      `Error feedback through step ${this.at}, summed over the ${n} values: what was sent plus what is still owed is what came in.`,
      ...inv.ranks.map((x, r) =>
        this.sum(`inv-rank-${r}`, `rank ${r}:`, [['Σ sent', x.sent], ['+ residual e₁', x.residual], ['=', x.sent + x.residual], ['= Σ inputs', x.inputs]])
      ),
      this.sum('inv-call', 'whole call:', [['Σ outputs', inv.delivered], ['+ residuals e₂ + Σ e₁', inv.residual], ['=', inv.delivered + inv.residual], [
        '= Σ inputs',
        inv.inputs,
      ]]),
      Object.assign(document.createElement('span'), { textContent: 'Largest gap of any single value: ' }),
    );
    this.invariant.lastElementChild!.append(gap, ' (f32 rounding).');
    this.invariant.dataset.gap = String(inv.gap);
  }

  /** One line: `label` then `name value` pairs, each value in a <b> (the e2e test reads them back). */
  private sum(testid: string, label: string, parts: [string, number][]): HTMLElement {
    const span = document.createElement('span');
    span.dataset.testid = testid;
    span.append(label);
    for (const [name, v] of parts) span.append(` ${name} `, Object.assign(document.createElement('b'), { textContent: fix(v) }));
    return span;
  }

  /** One row per value: inputs, sent, residuals per rank, then the result and e₂; chunks marked. */
  private table(s: CompressStep, c: number): HTMLTableElement {
    const p = s.inputs.length, tbl = document.createElement('table');
    tbl.className = 'totals cmp-table';
    const head = tbl.createTHead().insertRow();
    const cols = ['i', ...[...Array(p).keys()].flatMap((r) => [`x r${r}`, `sent r${r}`, `e₁ r${r}`]), 'output', 'e₂'];
    for (const h of cols) head.insertCell().textContent = h;
    const scale = Math.max(1e-9, ...s.residual.flatMap((e) => [...e].map(Math.abs)), ...[...s.reducedResidual].map(Math.abs));
    const body = tbl.createTBody();
    for (let i = 0; i < s.output.length; i++) {
      const row = body.insertRow();
      if (i % c === 0) row.className = 'chunk-start';
      const label = row.insertCell();
      label.textContent = i % c === 0 ? `${i} · chunk ${i / c} → r${i / c}` : String(i);
      const cell = (v: number, kind: string) => {
        const td = row.insertCell();
        td.textContent = fix(v);
        td.dataset.col = kind;
        if (kind === 'sent' && v !== 0) td.className = 'kept';
        if (kind.startsWith('e')) td.style.background = `rgba(220, 38, 38, ${(0.45 * Math.abs(v)) / scale})`;
      };
      for (let r = 0; r < p; r++) {
        cell(s.inputs[r][i], 'x');
        cell(s.sent[r][i], 'sent');
        cell(s.residual[r][i], `e1-${r}`);
      }
      cell(s.output[i], 'output');
      cell(s.reducedResidual[i], 'e2');
    }
    return tbl;
  }
}
