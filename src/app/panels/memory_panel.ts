/**
 * The Memory panel: per rank, stacked bars of parameter, gradient, optimizer-state and
 * activation bytes — what the run reports (when it does) above what the ZeRO formulas
 * predict (`rankMemory`, src/parallel/cost/cost.ts: 4 B parameter + 4 B gradient + 8 B AdamW
 * state per element in fp32, sharded over the dp·cp group by stage, experts over dp·cp/ep)
 * for the rank's own parameters (`rankParams`: its TP shard of its pipeline stage).
 */
import { rankMemory } from '../../perf/memory_cost.ts';
import { type ParallelPlan, type PlanModel, planWorldSize } from '../../parallel/plan/plan.ts';
import type { TrainConfig } from '../../train/config.ts';
import { planActivations, shapeConfig } from '../../perf/activation_memory.ts';
import { fmtBytes } from './trace_io.ts';

/** Bytes one rank holds (as a run reports them). */
export interface RankMemory {
  rank: number;
  params: number;
  grads: number;
  optimizer: number;
  /** Peak activation bytes; absent when the run does not measure them. */
  activations?: number;
}

const PARTS = ['params', 'grads', 'optimizer', 'activations'] as const;
const COLOURS: Record<(typeof PARTS)[number], string> = { params: '#3b82f6', grads: '#f59e0b', optimizer: '#8b5cf6', activations: '#10b981' };

/**
 * Every rank's activation peak (activation_memory.ts: counted from the model's forward over a meta GPU) for the run's
 * config, or without one the model of `model`'s shape and `arch`; undefined per rank where it cannot be counted.
 */
async function activationPeaks(plan: ParallelPlan, model: PlanModel, arch: string, cfg?: TrainConfig) {
  try {
    return (await planActivations(cfg ?? shapeConfig(model, { arch }), plan, model.vocabSize)).map((a) => a.bytes);
  } catch {
    return [];
  }
}

/** The formula's bytes for every rank of `plan`. @throws Error when the plan is invalid for the model. */
export async function formulaMemory(
  plan: ParallelPlan,
  model: PlanModel,
  arch = 'gpt',
  cfg?: TrainConfig,
): Promise<RankMemory[]> {
  const acts = await activationPeaks(plan, model, arch, cfg);
  return [...Array(planWorldSize(plan)).keys()].map((rank) => {
    const z = rankMemory(plan, model, rank);
    return { rank, params: z.params, grads: z.grads, optimizer: z.optimizer, activations: acts[rank] };
  });
}

/** The Memory view: measured and formula bars per rank, rebuilt by {@link MemoryPanel.update}. */
export class MemoryPanel {
  private readonly bars: HTMLElement;
  private readonly summary: HTMLElement;
  /** Calls of {@link update} so far: a slower earlier one does not overwrite a later one. */
  private calls = 0;

  constructor(host: HTMLElement) {
    host.innerHTML = `
      <p class="summary" data-testid="memory-summary">Choose a parallel plan: the bars show what each rank holds.</p>
      <p class="legend">${PARTS.map((k) => `<i style="background:${COLOURS[k]}"></i>${k === 'optimizer' ? 'optimizer state' : k}`).join(' ')}</p>
      <div class="mem-bars" data-testid="memory-bars"></div>
      <p class="hint">Measured: the bytes each rank's parameter store keeps (ZeRO: what its stage keeps) and, as activations, the
      peak of its GPU buffer pool (activations and temporaries). Formula: <code>zeroMemoryFp32</code> — 4 B parameter, 4 B gradient,
      8 B AdamW state per element, sharded over the data-parallel group by stage (ZeRO-2/3 add their one-layer working buffers) — and
      the activations the autograd tapes keep (<code>activationMemory</code>, counted by running the model's own forward over a meta GPU)
      for the micro-batches a pipeline stage keeps in flight (GPipe: all m; 1F1B: at most p).</p>`;
    this.bars = host.querySelector('[data-testid="memory-bars"]')!;
    this.summary = host.querySelector('[data-testid="memory-summary"]')!;
  }

  /** Shows the formula for `plan` (of the run's `cfg` when given) and, when given, the measured bytes per rank; a later call wins. */
  async update(plan: ParallelPlan, model: PlanModel, measured: RankMemory[] = [], arch = 'gpt', cfg?: TrainConfig): Promise<void> {
    const call = ++this.calls;
    let formula: RankMemory[];
    try {
      formula = await formulaMemory(plan, model, arch, cfg);
    } catch (e) {
      if (call !== this.calls) return;
      this.summary.textContent = `No prediction: ${(e as Error).message}`;
      this.bars.replaceChildren();
      return;
    }
    if (call !== this.calls) return;
    const total = (m: RankMemory) => m.params + m.grads + m.optimizer + (m.activations ?? 0);
    const max = Math.max(1, ...formula.map(total), ...measured.map(total));
    this.summary.textContent = `ZeRO-${plan.zero} over a data-parallel group of ${plan.dp * plan.cp}, tp ${plan.tp}, pp ${plan.pp}: ` +
      `formula ${fmtBytes(formula.reduce((a, m) => a + total(m), 0))} over ${formula.length} ranks` +
      (measured.length ? ` · measured ${fmtBytes(measured.reduce((a, m) => a + total(m), 0))}` : ' · no measurement yet (start a run)');
    const rows = formula.map((f) => {
      const row = document.createElement('div');
      row.className = 'mem-row';
      row.dataset.rank = String(f.rank);
      const label = document.createElement('div');
      label.className = 'mem-label';
      label.textContent = `rank ${f.rank}`;
      row.append(label);
      const m = measured.find((x) => x.rank === f.rank);
      const stack = document.createElement('div');
      stack.className = 'mem-stack';
      if (m) stack.append(this.bar(m, max, 'measured'));
      stack.append(this.bar(f, max, 'formula'));
      row.append(stack);
      return row;
    });
    this.bars.replaceChildren(...rows);
  }

  private bar(m: RankMemory, max: number, what: string): HTMLElement {
    const wrap = document.createElement('div');
    wrap.className = `mem-bar ${what}`;
    wrap.dataset.testid = `mem-${what}`;
    const tag = document.createElement('span');
    tag.className = 'mem-tag';
    tag.textContent = what;
    wrap.append(tag);
    const track = document.createElement('div');
    track.className = 'mem-track';
    for (const k of PARTS) {
      const v = m[k] ?? 0;
      if (!v) continue;
      const seg = document.createElement('div');
      seg.style.width = `${(100 * v) / max}%`;
      seg.style.background = COLOURS[k];
      seg.title = `${k}: ${fmtBytes(v)}`;
      seg.dataset.part = k;
      track.append(seg);
    }
    const txt = document.createElement('span');
    txt.className = 'mem-total';
    txt.textContent = PARTS.filter((k) => m[k]).map((k) => `${k} ${fmtBytes(m[k]!)}`).join(' · ');
    wrap.append(track, txt);
    return wrap;
  }
}
