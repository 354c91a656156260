/**
 * The runs the page shows, and how each reaches the Training view and the analysis views: a
 * run trained here — world size 1 in the demo's rank worker (with a text sample), a larger
 * world as a ParallelSession of that many workers (src/parallel/run/run.ts) — or a headless run
 * opened from its files. Kept apart from main.ts, which holds the page's state, forms and
 * buttons, so what a run feeds to which view reads in one place.
 */
import type { ParallelPlan, PlanModel } from '../parallel/plan/plan.ts';
import { planRegionBytes } from '../parallel/plan/plan_schema.ts';
import type { TrainConfig } from '../train/config.ts';
import { progressProxy, type ProgressRecord, type RankHandle } from './rank.ts';
import type { DatasetPicker } from './panels/dataset.ts';
import type { LoadedRun } from './panels/open_run.ts';
import type { ParallelSession } from './panels/parallel_run.ts';
import type { ParallelChoice } from './panels/parallel_setup.ts';
import { fmt, type TrainingView } from './panels/training_view.ts';
import type { Views } from './panels/views.ts';

/** The parts of the page a run reports to. */
export interface RunPage {
  tv: TrainingView;
  views: Views;
  dataset: DatasetPicker;
  setStatus(text: string): void;
  logLine(text: string, cls?: string): void;
  /** Whether Pause is pressed: progress then leaves the status line to what pausing said. */
  paused(): boolean;
  /** The model the parallel plan must fit, from a config (the form's, or an opened run's). */
  planModel(cfg: TrainConfig, vocabSize?: number): PlanModel;
}

/** How a run ended: the line the page reports, and whether Stop ended it. */
export interface RunEnd {
  line: string;
  stopped: boolean;
}

/** Trains `cfg` in the rank worker; its progress records feed the Training view. */
export async function trainOnRank(rank: RankHandle, cfg: TrainConfig, page: RunPage): Promise<RunEnd> {
  const { tv } = page;
  const onProgress = (rec: ProgressRecord) => {
    if (rec.kind === 'train') {
      tv.loss.addTrain(rec.points);
      tv.step(rec, cfg.steps);
      if (!page.paused()) page.setStatus(`Training… step ${rec.step + 1} of ${cfg.steps}`);
    } else if (rec.kind === 'eval') tv.val(rec.step, rec.valLoss);
    else {
      page.logLine(rec.text, 'note');
      if (rec.text.startsWith('paused')) page.setStatus(`Paused after step ${rec.text.replace(/\D+/g, '')}: press Resume or Step to continue.`);
      else if (!page.paused()) page.setStatus(rec.text.startsWith('model:') ? 'Compiling kernels and training…' : `${rec.text[0].toUpperCase()}${rec.text.slice(1)}…`);
    }
  };
  const summary = await rank.api.train(cfg, progressProxy(onProgress));
  tv.sample.textContent = summary.sample;
  const loss = summary.finalLoss !== null ? `loss ${fmt.loss(summary.firstLoss!)} → ${fmt.loss(summary.finalLoss)}` : 'no steps';
  const val = summary.valLoss !== null ? ` · val loss ${fmt.loss(summary.valLoss)}` : '';
  return { line: `${summary.stopped ? 'Stopped' : 'Done'}: ${summary.steps} steps in ${(summary.ms / 1000).toFixed(1)} s · ${loss}${val}`, stopped: summary.stopped };
}

/**
 * Trains `cfg` under `choice`'s plan on a world of workers: steps feed the Training view, trace
 * spans and measured memory the analysis views. `onSession` gets the session as soon as it
 * exists, so Pause, Step and Stop can steer it.
 */
export async function trainOnWorld(choice: ParallelChoice, cfg: TrainConfig, page: RunPage, onSession: (s: ParallelSession) => void): Promise<RunEnd> {
  const { tv, views } = page, t0 = performance.now();
  const corpus = await page.dataset.current();
  tv.sample.textContent = 'Samples come from single-rank runs (world size 1); a parallel run reports losses, traffic and memory.';
  let done = 0;
  // Loaded on first use: the host side of run.ts pulls in the trainers' module graph.
  const { ParallelSession } = await import('./panels/parallel_run.ts');
  // Rings as large as the plan's largest message needs (twice over), as the CLI sizes them
  // (docs/design.md#the-shared-data-plane-of-worker-ranks).
  const regionBytes = planRegionBytes(choice.plan, page.planModel(cfg), choice.regionMb);
  const session = new ParallelSession({ ...choice, regionBytes }, cfg, corpus.text, {
    onStep: (rep) => {
      done = rep.step + 1;
      tv.loss.addTrain([[rep.step, rep.loss]]);
      tv.step(rep, cfg.steps);
      if (rep.valLoss !== undefined) tv.val(rep.step, rep.valLoss);
      if (!page.paused()) page.setStatus(`Training on ${choice.worldSize} ranks… step ${rep.step + 1} of ${cfg.steps}`);
    },
    onSpans: (spans) => views.addSpans(spans, done),
    onPlane: (plane, note) => {
      views.reset({ run: 'browser demo', plan: choice.plan, net: choice.net, dataPlane: plane });
      page.logLine(note || `data plane: ${plane}${plane === 'shared' ? ' (SharedArrayBuffer rings)' : ' (MessagePorts)'}`, 'note');
    },
    onStatus: (text) => page.setStatus(`${text[0].toUpperCase()}${text.slice(1)}`),
  });
  onSession(session);
  if (page.paused()) session.pause(); // Pause pressed while the page was still preparing the run
  const res = await session.run();
  views.setMeasured(res.ranks.map((x) => ({ rank: x.rank, params: x.memory.params, grads: x.memory.grads, optimizer: x.memory.optimizer, activations: x.memory.peakPool })));
  const first = res.steps[0]?.loss, last = res.steps[res.steps.length - 1]?.loss;
  const loss = first !== undefined ? `loss ${fmt.loss(first)} → ${fmt.loss(last!)}` : 'no steps';
  return { line: `${res.stopped ? 'Stopped' : 'Done'}: ${res.steps.length} steps on ${choice.worldSize} ranks in ${((performance.now() - t0) / 1000).toFixed(1)} s · ${loss} · ${views.allSpans.length} trace spans`, stopped: res.stopped };
}

/** Shows an opened run: its metrics in the Training view, its trace under its plan in the analysis views. */
export function showOpenedRun(run: LoadedRun, page: RunPage): void {
  const { tv, views } = page;
  if (run.metrics) {
    tv.clear();
    tv.loss.addTrain(run.metrics.train.map((r) => [r.step, r.loss]));
    for (const r of run.metrics.train) tv.step(r);
    for (const v of run.metrics.val) tv.val(v.step, v.valLoss);
    tv.sample.textContent = 'An opened run brings no sample: the run directory keeps it in sample.txt.';
    page.setStatus(`Showing ${run.name}`);
  }
  // config.json (or the trace's otherData) carries the plan of a `npm run train -- --dp …` run.
  const cfg = run.config, p = (cfg?.plan ?? run.meta?.plan) as ParallelPlan | undefined;
  const n = run.spans ? Math.max(...run.spans.map((s) => s.rank)) + 1 : p ? p.dp * p.pp * p.cp * p.tp : 1;
  const plan = p && p.dp * p.pp * p.cp * p.tp === n ? p : null;
  if (plan && cfg) views.setPlan(plan, page.planModel({ ...(cfg as unknown as TrainConfig), padVocab: Number(cfg.padVocab) || 1 }, Number(cfg.vocabSize) || undefined), String(cfg.arch ?? 'gpt')); // runs saved before --pad-vocab: none
  if (run.spans) {
    views.reset(run.meta ?? {});
    views.mesh.setShape(plan ? [plan.dp, plan.pp, plan.cp, plan.tp] : [n, 1, 1, 1]);
    views.addSpans(run.spans, cfg && run.metrics ? run.metrics.train.length : 0);
  }
}
