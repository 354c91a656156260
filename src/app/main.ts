/**
 * The browser demo: a Setup form validated by the trainer's own parseConfig and the plan's rules (planProblems);
 * world size 1 trains in one rank worker (with text samples), larger worlds launch that many
 * workers and run the parallel plan (src/parallel/run/run.ts). Live loss / tokens-per-second
 * charts, and the trace feeds the Timeline, Communication, Memory and Mesh views; Learn runs
 * small real collectives and schedules step by step; Open run replays a headless run's files;
 * the Plan explorer ranks plans for a paper-scale cluster and starts a scaled-down one here.
 * Without WebGPU the page explains why instead of staying blank.
 */
import { MOE_ARCHS } from '../models/archs.ts';
import './style.css';
import { SetupForm, type FormResult } from './form.ts';
import { checkWebGpuApi, classifyInitError, renderUnsupported, type Unsupported } from './support.ts';
import { type RankHandle, type RankInfo, spawnRankWorker, startRank } from './rank.ts';
import type { TrainConfig } from '../train/config.ts';
import { DEFAULT_PLAN, type PlanModel } from '../parallel/plan/plan.ts';
import { planModelOf } from '../parallel/run/run.ts';
import { World } from '../comm/launch.ts';
import { type RunPage, showOpenedRun, trainOnRank, trainOnWorld } from './page_runs.ts';
import { ParallelSetup, type ParallelResult } from './panels/parallel_setup.ts';
import type { ParallelSession } from './panels/parallel_run.ts';
import { Tabs } from './panels/tabs.ts';
import { Views } from './panels/views.ts';
import { RingLesson } from './panels/learn_ring.ts';
import { PipelineLesson } from './panels/learn_pipeline.ts';
import { TpLesson } from './panels/learn_tp.ts';
import { CompressLesson } from './panels/learn_compress.ts';
import { type LoadedRun, OpenRunPanel } from './panels/open_run.ts';
import { fmt, TrainingView } from './panels/training_view.ts';
import { DatasetPicker } from './panels/dataset.ts';
import { PlanExplorer } from './panels/plan_explorer.ts';
import { type ScaledRun, setupValues } from './panels/plan_scale.ts';

type State = 'loading' | 'ready' | 'running' | 'done' | 'stopped' | 'error' | 'unsupported';
const $ = <T extends HTMLElement = HTMLElement>(sel: string) => document.querySelector<T>(sel)!;
const el = {
  app: $('#app'), adapter: $('#adapter'), unsupported: $('#unsupported'), form: $<HTMLFormElement>('#setup-form'),
  start: $<HTMLButtonElement>('#start'), pause: $<HTMLButtonElement>('#pause'), step: $<HTMLButtonElement>('#step'), stop: $<HTMLButtonElement>('#stop'),
  status: $('#status'), sampleAgain: $<HTMLButtonElement>('#sample-again'), retry: $<HTMLButtonElement>('#retry'),
};

let state: State = 'loading';
let rank: RankHandle | null = null;
let info: RankInfo | null = null;
let session: ParallelSession | null = null;
let paused = false;
let formResult: FormResult | null = null;
let planResult: ParallelResult = { ok: false, problems: [] };
let lastCfg: TrainConfig | null = null;
const canStart = () => !!formResult?.ok && planResult.ok && !!info;

function setState(s: State): void {
  state = s;
  document.body.dataset.state = s;
  const running = s === 'running';
  el.start.disabled = running || !canStart();
  el.pause.disabled = el.stop.disabled = el.step.disabled = !running;
  el.sampleAgain.disabled = !((s === 'done' || s === 'stopped') && !session && lastCfg);
  form.setDisabled(running);
  parallel.setDisabled(running);
  dataset.setDisabled(running || s === 'loading');
  explorer.setRunning(running || s === 'loading' || s === 'unsupported');
  if (!running) {
    paused = false;
    el.pause.textContent = 'Pause';
  }
}

function setStatus(text: string): void {
  el.status.textContent = text;
  explorer.status(text);
}

const logLine = (text: string, cls = '') => tv.line(text, cls);

function showUnsupported(why: Unsupported): void {
  el.app.hidden = true;
  el.adapter.textContent = 'No WebGPU';
  el.unsupported.querySelector<HTMLElement>('[data-slot="webgpu-help"]')!.hidden = why.reason === 'error';
  renderUnsupported(el.unsupported, why);
  setState('unsupported');
}

function finish(line: string, s: State): void {
  logLine(line, s === 'error' ? 'error' : 'note');
  el.status.setAttribute('role', s === 'error' ? 'alert' : 'status');
  setStatus(line);
  setState(s);
}

async function startTraining(): Promise<void> {
  const r = form.validate(), pr = parallel.validate();
  if (!r.ok || !pr.ok || !rank || !info || state === 'running') return;
  lastCfg = r.cfg;
  tv.clear();
  views.reset({ run: 'browser demo', plan: pr.choice.plan, net: pr.choice.net });
  setState('running');
  setStatus('Starting…');
  logLine(`run: ${r.cfg.steps} steps · batch ${r.cfg.batchSize} · lr ${fmt.lr(r.cfg.lr)} · ${pr.choice.worldSize} rank(s) · ${pr.choice.net}`, 'note');
  try {
    const end = pr.choice.worldSize === 1 ? await trainOnRank(rank, r.cfg, page) : await trainOnWorld(pr.choice, r.cfg, page, (s) => (session = s));
    finish(end.line, end.stopped ? 'stopped' : 'done');
  } catch (e) {
    const msg = (e as Error).message ?? String(e);
    finish(`Error: ${msg}`, 'error');
  } finally {
    session = null;
    el.sampleAgain.disabled = !(state === 'done' || state === 'stopped') || pr.choice.worldSize !== 1;
  }
}

/** The model the parallel plan must fit, from a config (the form's, or an opened run's). */
function planModel(cfg: TrainConfig, vocabSize = info?.vocabSize ?? 65): PlanModel {
  const moe = (MOE_ARCHS as readonly string[]).includes(cfg.arch) ? { nExpert: cfg.nExpert, moeEvery: cfg.moeEvery } : {};
  return { ...planModelOf(DEFAULT_PLAN, cfg, vocabSize), ...moe }; // the CLI's, with the architecture's layout
}

function refreshStart(): void {
  if (state !== 'running') el.start.disabled = !canStart();
}

function onFormChange(r: FormResult): void {
  formResult = r;
  if (r.ok) parallel?.setModel(planModel(r.cfg), r.cfg);
  refreshStart();
}

function onPlanChange(r: ParallelResult): void {
  const wasOk = planResult.ok;
  planResult = r;
  if (state === 'ready' && !r.ok) setStatus(`Cannot start: invalid parallel plan: ${r.problems.join('; ')}`);
  else if (state === 'ready' && r.ok && !wasOk) setStatus('Ready. Choose a setup and press Start training.');
  if (r.ok && formResult?.ok) views?.setPlan(r.choice.plan, planModel(formResult.cfg), formResult.cfg.arch, formResult.cfg, info?.vocabSize ?? 65);
  refreshStart();
}

function onOpen(run: LoadedRun): void {
  if (state !== 'running') showOpenedRun(run, page);
}

/**
 * The Plan explorer's scaled-down run: fills the Setup form and the parallel fields with the
 * plan and starts the ordinary run, or says why it cannot start.
 */
function startScaledRun(run: ScaledRun, steps: number, net: string): string | null {
  if (state === 'running') return 'a run is in progress: stop it first';
  if (!info || state === 'loading' || state === 'unsupported') return 'the GPU is not ready yet';
  let values;
  try {
    values = setupValues(run, steps, net, formResult?.ok ? formResult.cfg.gradAccum : 1);
  } catch (e) {
    return (e as Error).message;
  }
  form.set(values.form);
  parallel.set(values.parallel);
  if (!formResult?.ok) return `the Setup form refuses it: ${formResult?.message ?? 'invalid'}`;
  if (!planResult.ok) return `the parallel Setup refuses it: ${planResult.problems.join('; ')}`;
  void startTraining();
  return null;
}

/** Loads the chosen corpus into the rank worker (its tokenizer and vocabulary) and revalidates the plan. */
async function loadCorpus(): Promise<void> {
  if (!rank) return;
  const c = await dataset.current();
  info = await rank.api.init({ text: c.text });
  dataset.describe(info.corpusChars, info.vocabSize);
  logLine(`data: ${c.name} · ${info.corpusChars.toLocaleString('en')} characters · vocab ${info.vocabSize}`, 'note');
  if (formResult?.ok) parallel.setModel(planModel(formResult.cfg), formResult.cfg);
}

async function onDatasetChange(): Promise<void> {
  if (state === 'running' || state === 'loading' || !rank) return;
  setState('loading');
  setStatus('Loading the training text…');
  try {
    await loadCorpus();
    setStatus('Ready. Choose a setup and press Start training.');
  } catch (e) {
    setStatus(`Error: ${(e as Error).message}`);
  }
  setState('ready');
}

// ---- boot ------------------------------------------------------------------------------

const tv = new TrainingView();
const tp = new TpLesson($('#learn-tp'));
const views = new Views({ timeline: $('#timeline'), comm: $('#comm'), memory: $('#memory'), mesh: $('#mesh') }, tp);
const explorer = new PlanExplorer($('#explorer'), startScaledRun);
const dataset = new DatasetPicker($('#dataset-fields'), import.meta.env.BASE_URL, () => void onDatasetChange());
const parallel = new ParallelSetup($('#parallel-fields'), onPlanChange);
const form = new SetupForm(el.form, onFormChange);
const page: RunPage = { tv, views, dataset, setStatus, logLine, paused: () => paused, planModel };
new RingLesson($('#learn-ring'), async (p) => {
  const w = await World.launch({ size: p, spawn: spawnRankWorker, net: planResult.ok ? planResult.choice.net : 'nvlink-ib', timeoutMs: 20_000, runTimeoutMs: 60_000 });
  try {
    await w.run('one', { coll: 'allReduce', algorithm: 'ring', bytes: 4 * 4 * p });
    return await w.trace();
  } finally {
    await w.shutdown();
  }
});
new PipelineLesson($('#learn-pipe'));
new CompressLesson($('#learn-compress'), async (scheme) => (await import('./panels/compress_run.ts')).runCompressLesson(scheme));
new OpenRunPanel($('#open'), onOpen, new URL(`${import.meta.env.BASE_URL}example-run/`, location.href).href);
new Tabs($('#learn-tabs'));
new Tabs($('#views-tabs'), (id) => {
  if (id === 'mesh') void views.mesh.show();
  if (id === 'explorer') explorer.show();
});

// Fields can be preset from the URL (?preset=tiny&nLayer=1&dp=2&world=2), for sharing a setup.
{
  const q = new URLSearchParams(location.search);
  const preset = q.get('preset');
  if (preset) form.applyPreset(preset);
  const values: Record<string, string> = {}, par: Record<string, string> = {};
  for (const [k, v] of q) if (k !== 'preset') (parallel.has(k, v) ? par : values)[k] = v;
  if (Object.keys(values).length) form.set(values as never);
  if (Object.keys(par).length) parallel.set(par);
}

el.form.addEventListener('submit', (ev) => {
  ev.preventDefault();
  void startTraining();
});
el.pause.addEventListener('click', () => {
  if (state !== 'running') return;
  paused = !paused;
  if (session) paused ? session.pause() : session.resume();
  else if (rank) void (paused ? rank.api.pause() : rank.api.resume());
  setStatus(paused ? 'Pausing after the current log interval…' : 'Training…');
  el.pause.textContent = paused ? 'Resume' : 'Pause';
});
el.step.addEventListener('click', () => {
  if (state !== 'running') return;
  paused = true;
  el.pause.textContent = 'Resume';
  if (session) session.stepOnce();
  else if (rank) void rank.api.resume().then(() => rank?.api.pause());
  setStatus('Running one more logged step…');
});
el.stop.addEventListener('click', () => {
  if (state !== 'running') return;
  if (session) session.stop();
  else void rank?.api.stop();
  setStatus('Stopping after the current log interval…');
});
el.sampleAgain.addEventListener('click', async () => {
  if (!rank || !lastCfg) return;
  el.sampleAgain.disabled = true;
  setStatus('Sampling…');
  try {
    tv.sample.textContent = await rank.api.sample(Math.max(1, lastCfg.sampleTokens || 200));
    setStatus('New sample ready.');
  } catch (e) {
    setStatus(`Error: ${(e as Error).message}`);
  } finally {
    el.sampleAgain.disabled = false;
  }
});
el.retry.addEventListener('click', () => location.reload());

async function boot(): Promise<void> {
  setState('loading');
  const missing = checkWebGpuApi();
  if (missing) return showUnsupported(missing);
  rank = startRank((msg) => {
    if (state === 'loading') showUnsupported({ reason: 'error', detail: `The rank worker failed to load: ${msg}` });
  });
  try {
    await loadCorpus();
  } catch (e) {
    rank.terminate();
    rank = null;
    return showUnsupported(classifyInitError((e as Error).message ?? String(e)));
  }
  el.adapter.textContent = `GPU: ${info!.adapter} · ${info!.backend}`;
  el.adapter.title = info!.gpuLine;
  logLine(info!.gpuLine, 'note');
  setStatus('Ready. Choose a setup and press Start training.');
  setState('ready');
}

void boot();
