/**
 * The analysis views of one run — Timeline, Communication, Memory, Mesh and the TP lesson —
 * fed from the same data whether it comes from a live run or from opened files: the trace
 * spans, the plan and model (for predictions) and the per-rank memory a run reports.
 */
import type { Span } from '../../comm/trace.ts';
import { type ParallelPlan, type PlanModel, planWorldSize } from '../../parallel/plan/plan.ts';
import { rankStepTraffic } from '../../perf/compression_report.ts';
import type { CountedRows } from './comm_compression.ts';
import type { TrainConfig } from '../../train/config.ts';
import { CommPanel } from './comm_panel.ts';
import { MemoryPanel, type RankMemory } from './memory_panel.ts';
import { MeshPanel } from './mesh_panel.ts';
import { TimelinePanel } from './timeline.ts';
import type { TpLesson } from './learn_tp.ts';

/** Holds one run's spans, plan and memory and keeps the analysis views in step with them. */
export class Views {
  readonly timeline: TimelinePanel;
  readonly comm: CommPanel;
  readonly memory: MemoryPanel;
  readonly mesh: MeshPanel;
  private spans: Span[] = [];
  private plan: ParallelPlan | null = null;
  private model: PlanModel | null = null;
  private arch = 'gpt';
  /** The run's config (PowerSGD's gradient matrices in the traffic prediction); absent for opened runs. */
  private cfg: TrainConfig | undefined;
  private measured: RankMemory[] = [];
  /** Optimizer steps the spans cover (for the traffic prediction); 0 = unknown. */
  private steps = 0;
  private meta: Record<string, unknown> = {};
  /** Every rank's step counted from the model for the current plan and config, once derived (a meta step each). */
  private rows: CountedRows | undefined;

  constructor(hosts: { timeline: HTMLElement; comm: HTMLElement; memory: HTMLElement; mesh: HTMLElement }, private readonly tp: TpLesson) {
    this.timeline = new TimelinePanel(hosts.timeline);
    this.comm = new CommPanel(hosts.comm);
    this.memory = new MemoryPanel(hosts.memory);
    this.mesh = new MeshPanel(hosts.mesh);
  }

  /**
   * A new plan chosen in Setup (no run yet): predictions and the mesh follow it. With the config and the tokenizer's
   * vocabulary, each rank's step is counted from the model in the background and the views refreshed when it is.
   */
  setPlan(plan: ParallelPlan, model: PlanModel, arch = 'gpt', cfg?: TrainConfig, vocabSize?: number): void {
    this.plan = plan;
    this.model = model;
    this.arch = arch;
    this.cfg = cfg;
    this.rows = undefined;
    if (cfg && vocabSize) void this.count(plan, cfg, vocabSize);
    this.mesh.setShape([plan.dp, plan.pp, plan.cp, plan.tp]);
    void this.memory.update(plan, model, this.measured, arch, cfg);
    if (!this.spans.length) {
      this.tp.setData(model);
      this.comm.preview({ plan, model, cfg });
    }
  }

  /** Counts every rank's step of `plan` from the model (raw and under its policy); kept if the plan is still current. */
  private async count(plan: ParallelPlan, cfg: TrainConfig, vocabSize: number): Promise<void> {
    const ranks = [...Array(planWorldSize(plan)).keys()];
    try {
      const packed = await Promise.all(ranks.map((r) => rankStepTraffic(plan, cfg, vocabSize, r)));
      const raw = plan.compress ? await Promise.all(ranks.map((r) => rankStepTraffic(plan, cfg, vocabSize, r, {}, true))) : packed;
      if (this.plan !== plan || this.cfg !== cfg) return;
      this.rows = { raw, packed };
    } catch (e) {
      console.warn(`views: the step of ${ranks.length} rank(s) could not be counted: ${(e as Error).message}`);
      return;
    }
    // Before a run the Communication panel previews the plan; once spans arrive, refresh sets prediction beside them.
    if (this.steps > 0) this.refresh();
    else this.comm.preview({ plan, model: this.model!, cfg, rows: this.rows });
  }

  /** Clears the previous run's data (a new run starts). */
  reset(meta: Record<string, unknown> = {}): void {
    this.spans = [];
    this.measured = [];
    this.steps = 0;
    this.meta = meta;
    this.refresh();
  }

  /** Adds spans of the running (or opened) run; `steps`: steps covered so far. */
  addSpans(spans: readonly Span[], steps: number): void {
    this.spans.push(...spans);
    this.steps = steps;
    this.refresh();
    // Live runs: light the links that carried this batch's messages.
    const pairs = new Set(spans.filter((s) => s.kind === 'send').map((s) => `${Math.min(s.rank, s.peer)}-${Math.max(s.rank, s.peer)}`));
    for (const p of pairs) this.mesh.pulse(...(p.split('-').map(Number) as [number, number]));
  }

  /** Per-rank memory as the run reported it. */
  setMeasured(mem: RankMemory[]): void {
    this.measured = mem;
    if (this.plan && this.model) void this.memory.update(this.plan, this.model, mem, this.arch, this.cfg);
  }

  /** Every span collected so far. */
  get allSpans(): readonly Span[] {
    return this.spans;
  }

  private refresh(): void {
    this.timeline.setSpans(this.spans, this.meta);
    this.mesh.setSpans(this.spans);
    const pred = this.plan && this.model && this.steps > 0 ? { plan: this.plan, model: this.model, steps: this.steps, cfg: this.cfg, rows: this.rows } : undefined;
    this.comm.update(this.spans, pred);
    if (this.model) this.tp.setData(this.model, this.spans, this.steps || 1);
  }
}
