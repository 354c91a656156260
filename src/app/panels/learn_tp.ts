/**
 * Learn: one Megatron tensor-parallel MLP on two ranks (Shoeybi et al., arXiv 1909.08053 §3),
 * step by step: which tensors are replicated and which split, and where the conjugate
 * operators f (identity forward, allReduce backward) and g (allReduce forward, identity
 * backward) communicate. Sizes come from the current model; the allReduce count and bytes from
 * a tp run's trace when one is loaded (collective spans of a `tp` group), else from the plan's
 * traffic rows (src/parallel/cost/cost.ts `stepTraffic` for tp 2).
 */
import type { Span } from '../../comm/trace.ts';
import { stepTraffic } from '../../parallel/cost/cost.ts';
import { makePlan, type PlanModel, planProblems } from '../../parallel/plan/plan.ts';
import { fmtBytes } from './trace_io.ts';

interface Stage {
  title: string;
  text: string;
  /** Per tensor: 'rep' (same on both ranks), 'split' (each rank its half), 'partial' (each rank a partial sum). */
  tensors: [string, 'rep' | 'split' | 'partial'][];
  comm?: string;
}

/** The Megatron TP lesson: eight steps through one tensor-parallel MLP on two ranks. */
export class TpLesson {
  private readonly board: HTMLElement;
  private readonly caption: HTMLElement;
  private readonly source: HTMLElement;
  private stages: Stage[] = [];
  private at = 0;

  constructor(host: HTMLElement) {
    host.innerHTML = `
      <p>Tensor parallelism splits each weight matrix across ranks. An MLP Z = GeLU(X·A)·B puts A's <b>columns</b> and B's
      <b>rows</b> on different ranks, so the GeLU needs no communication and one allReduce per pass finishes the layer.</p>
      <div class="toolbar">
        <button type="button" data-act="prev">◀ Back</button>
        <button type="button" data-act="next" data-testid="tp-next">Step ▶</button>
      </div>
      <p class="caption" data-testid="tp-caption" aria-live="polite"></p>
      <div class="tp-board" data-testid="tp-board"></div>
      <p class="hint" data-testid="tp-source"></p>`;
    this.board = host.querySelector('.tp-board')!;
    this.caption = host.querySelector('.caption')!;
    this.source = host.querySelector('[data-testid="tp-source"]')!;
    host.querySelector('[data-act="prev"]')!.addEventListener('click', () => this.go(this.at - 1));
    host.querySelector('[data-act="next"]')!.addEventListener('click', () => this.go(this.at + 1));
  }

  /**
   * Rebuilds the lesson for `model` (b·s·C activations); `spans`: a traced run, whose tp-group
   * allReduces (if any) give the measured count and bytes.
   */
  setData(model: PlanModel, spans: readonly Span[] = [], steps = 1): void {
    const C = model.nEmbd, T = model.blockSize, b = model.batchSize;
    const act = `${b}×${T}×${C}`, bytes = b * T * C * 4;
    const tpColl = spans.filter((s) => s.kind === 'collective' && s.op === 'allReduce' && /^tp/.test(s.group) && s.rank === 0);
    if (tpColl.length) {
      const total = tpColl.reduce((a, s) => a + s.bytes, 0);
      this.source.textContent = `From the loaded tp run's trace: rank 0 made ${tpColl.length} allReduces in its tensor-parallel group over ${steps} step(s), ${fmtBytes(total)} in all.`;
    } else {
      const plan = makePlan({ tp: 2 }), problems = planProblems(plan, model, 2);
      if (problems.length) this.source.textContent = `This model cannot be split over tp 2: ${problems.join('; ')}`;
      else {
        // The lesson is Megatron's GPT block: another architecture is shown as the GPT of its shape.
        const { layout, ...shape } = model, rows = stepTraffic(plan, shape, 0).filter((r) => r.dim === 'tp');
        const of = layout ? `, a GPT of this model's shape, not its --arch ${layout.arch}` : '';
        this.source.textContent = `From the plan (stepTraffic, tp 2, rank 0, one step${of}): ` +
          rows.map((r) => `${r.calls}× ${r.collective} of ${fmtBytes(4 * r.n)} — ${r.what}`).join('; ') + '.';
      }
    }
    this.stages = [
      { title: 'Input', text: `X (${act}) is the same on both ranks: the previous layer ended with an allReduce.`, tensors: [['X', 'rep'], ['A', 'split'], ['B', 'split']] },
      { title: 'f: copy to the TP region', text: 'f is the identity in the forward pass — no bytes move. (Its backward is an allReduce.)', tensors: [['X', 'rep']] },
      { title: 'Column-parallel X·A', text: `Each rank multiplies X by its half of A's columns: Y_i = GeLU(X·A_i) is ${b}×${T}×${4 * C / 2}, different on each rank. GeLU is elementwise, so the split needs no exchange.`, tensors: [['X', 'rep'], ['A_i', 'split'], ['Y_i', 'split']] },
      { title: 'Row-parallel Y·B', text: `Each rank multiplies its Y_i by its half of B's rows: Z_i = Y_i·B_i is ${act}, a partial sum — Z = Z_0 + Z_1.`, tensors: [['Y_i', 'split'], ['B_i', 'split'], ['Z_i', 'partial']] },
      { title: 'g: allReduce forward', text: `g sums the partial results: one allReduce of ${act} (${fmtBytes(bytes)}); each rank sends ${fmtBytes(bytes / 2)} in a ring of 2. Z is replicated again.`, tensors: [['Z', 'rep']], comm: 'allReduce →' },
      { title: 'Backward through g', text: "g's backward is the identity: dZ is already the same on both ranks.", tensors: [['dZ', 'rep'], ['dB_i', 'split'], ['dY_i', 'split']] },
      { title: 'Backward through f: allReduce', text: `Each rank's dX_i = dY_i·A_iᵀ is a partial sum, so f's backward allReduces dX (${fmtBytes(bytes)}).`, tensors: [['dX_i', 'partial'], ['dX', 'rep']], comm: '← allReduce' },
      { title: 'Per layer', text: 'Attention splits the same way (QKV by columns = heads, the output projection by rows): 2 allReduces forward and 2 backward per transformer layer and micro-batch.', tensors: [['attention', 'split'], ['MLP', 'split']] },
    ];
    this.go(0);
  }

  private go(k: number): void {
    if (!this.stages.length) return;
    this.at = Math.max(0, Math.min(this.stages.length - 1, k));
    const st = this.stages[this.at];
    this.caption.textContent = `${this.at + 1}/${this.stages.length} · ${st.title}: ${st.text}`;
    this.board.replaceChildren(...[0, 1].map((r) => {
      const col = document.createElement('div');
      col.className = 'tp-rank';
      const h = document.createElement('div');
      h.textContent = `rank ${r}`;
      col.append(h);
      for (const [name, how] of st.tensors) {
        const t = document.createElement('div');
        t.className = `tp-tensor ${how}`;
        t.textContent = `${name.replace('_i', `_${r}`)} · ${how === 'rep' ? 'replicated' : how === 'split' ? `half ${r + 1} of 2` : 'partial sum'}`;
        col.append(t);
      }
      return col;
    }));
    if (st.comm) {
      const c = document.createElement('div');
      c.className = 'tp-comm';
      c.textContent = st.comm;
      this.board.insertBefore(c, this.board.lastChild);
    }
    this.board.dataset.stage = String(this.at);
  }
}
