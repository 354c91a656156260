/**
 * The browser demo: a Setup form validated by the trainer's own parseConfig, one rank worker
 * that owns the GPUDevice and trains, a live log and loss chart, and the final sample.
 * Without WebGPU the page explains why instead of staying blank.
 */
import './style.css';
import { SetupForm, type FormResult } from './form.ts';
import { LossChart } from './chart.ts';
import { checkWebGpuApi, classifyInitError, renderUnsupported, type Unsupported } from './support.ts';
import { progressProxy, type ProgressRecord, type RankHandle, type RankInfo, startRank, type TrainSummary } from './rank.ts';
import type { TrainConfig } from '../train/config.ts';

type State = 'loading' | 'ready' | 'running' | 'done' | 'stopped' | 'error' | 'unsupported';

const $ = <T extends HTMLElement = HTMLElement>(sel: string) => document.querySelector<T>(sel)!;

const el = {
  app: $('#app'),
  adapter: $('#adapter'),
  unsupported: $('#unsupported'),
  form: $<HTMLFormElement>('#setup-form'),
  start: $<HTMLButtonElement>('#start'),
  pause: $<HTMLButtonElement>('#pause'),
  stop: $<HTMLButtonElement>('#stop'),
  status: $('#status'),
  log: $('#log'),
  sample: $('#sample'),
  sampleAgain: $<HTMLButtonElement>('#sample-again'),
  step: $('#m-step'),
  loss: $('#m-loss'),
  val: $('#m-val'),
  ms: $('#m-ms'),
  tps: $('#m-tps'),
  retry: $<HTMLButtonElement>('#retry'),
};

let state: State = 'loading';
let rank: RankHandle | null = null;
let info: RankInfo | null = null;
let paused = false;
let formValid = false;
let lastCfg: TrainConfig | null = null;
const MAX_LOG_LINES = 1000;

function setState(s: State): void {
  state = s;
  document.body.dataset.state = s;
  const running = s === 'running';
  el.start.disabled = running || !formValid || !info;
  el.pause.disabled = !running;
  el.stop.disabled = !running;
  el.sampleAgain.disabled = !(s === 'done' || s === 'stopped');
  form.setDisabled(running);
  if (!running) {
    paused = false;
    el.pause.textContent = 'Pause';
  }
}

function setStatus(text: string): void {
  el.status.textContent = text;
}

function logLine(text: string, cls = '', data: Record<string, string> = {}): void {
  const row = document.createElement('div');
  row.className = `line ${cls}`.trim();
  row.textContent = text;
  Object.assign(row.dataset, data);
  const stick = el.log.scrollTop + el.log.clientHeight >= el.log.scrollHeight - 4;
  el.log.append(row);
  while (el.log.childElementCount > MAX_LOG_LINES) el.log.firstElementChild!.remove();
  if (stick) el.log.scrollTop = el.log.scrollHeight;
}

function showUnsupported(why: Unsupported): void {
  el.app.hidden = true;
  el.adapter.textContent = 'No WebGPU';
  const help = el.unsupported.querySelector<HTMLElement>('[data-slot="webgpu-help"]')!;
  help.hidden = why.reason === 'error';
  renderUnsupported(el.unsupported, why);
  setState('unsupported');
}

const fmt = {
  loss: (x: number) => x.toFixed(4),
  lr: (x: number) => x.toExponential(2),
  ms: (x: number) => (x >= 100 ? x.toFixed(0) : x.toFixed(1)),
  tps: (x: number) => String(Math.round(x)),
  step: (s: number) => String(s).padStart(5),
};

function onProgress(rec: ProgressRecord): void {
  if (rec.kind === 'train') {
    chart.addTrain(rec.points);
    el.step.textContent = `${rec.step + 1}${lastCfg ? ` / ${lastCfg.steps}` : ''}`;
    el.loss.textContent = fmt.loss(rec.loss);
    el.ms.textContent = fmt.ms(rec.ms);
    el.tps.textContent = fmt.tps(rec.tokensPerSec);
    logLine(`step ${fmt.step(rec.step)} | loss ${fmt.loss(rec.loss)} | lr ${fmt.lr(rec.lr)} | ${fmt.ms(rec.ms)} ms/step | ${fmt.tps(rec.tokensPerSec)} tokens/s`, 'train', {
      step: String(rec.step),
      loss: String(rec.loss),
    });
    if (!paused) setStatus(`Training… step ${rec.step + 1}${lastCfg ? ` of ${lastCfg.steps}` : ''}`);
  } else if (rec.kind === 'eval') {
    chart.addVal(rec.step, rec.valLoss);
    el.val.textContent = fmt.loss(rec.valLoss);
    logLine(`step ${fmt.step(rec.step)} | val loss ${fmt.loss(rec.valLoss)}`, 'eval', { step: String(rec.step), valLoss: String(rec.valLoss) });
  } else {
    logLine(rec.text, 'note');
    if (rec.text.startsWith('paused')) setStatus(`Paused after step ${rec.text.replace(/\D+/g, '')}: press Resume to continue.`);
    else if (!paused) setStatus(rec.text.startsWith('model:') ? 'Compiling kernels and training…' : `${rec.text[0].toUpperCase()}${rec.text.slice(1)}…`);
  }
}

async function startTraining(): Promise<void> {
  const r = form.validate();
  if (!r.ok || !rank || !info || state === 'running') return;
  lastCfg = r.cfg;
  chart.reset();
  el.log.replaceChildren();
  el.sample.textContent = '';
  for (const m of [el.step, el.loss, el.val, el.ms, el.tps]) m.textContent = '–';
  setState('running');
  setStatus('Starting…');
  logLine(`run: ${r.cfg.steps} steps · batch ${r.cfg.batchSize} · lr ${fmt.lr(r.cfg.lr)} · warmup ${r.cfg.warmup}`, 'note');
  let summary: TrainSummary;
  try {
    summary = await rank.api.train(r.cfg, progressProxy(onProgress));
  } catch (e) {
    const msg = (e as Error).message ?? String(e);
    logLine(`error: ${msg}`, 'error');
    setStatus(`Error: ${msg}`);
    el.status.setAttribute('role', 'alert');
    setState('error');
    return;
  }
  el.sample.textContent = summary.sample;
  const secs = (summary.ms / 1000).toFixed(1);
  const loss = summary.finalLoss !== null ? `loss ${fmt.loss(summary.firstLoss!)} → ${fmt.loss(summary.finalLoss)}` : 'no steps';
  const val = summary.valLoss !== null ? ` · val loss ${fmt.loss(summary.valLoss)}` : '';
  const line = `${summary.stopped ? 'Stopped' : 'Done'}: ${summary.steps} steps in ${secs} s · ${loss}${val}`;
  logLine(line, 'note');
  el.status.setAttribute('role', 'status');
  setStatus(line);
  setState(summary.stopped ? 'stopped' : 'done');
}

function onFormChange(r: FormResult): void {
  formValid = r.ok;
  if (state !== 'running') el.start.disabled = !formValid || !info;
}

// ---- boot ------------------------------------------------------------------------------

const chart = new LossChart($('#chart'), $('#chart-empty'));
const form = new SetupForm(el.form, onFormChange);

// Fields can be preset from the URL (?preset=tiny&nLayer=1&steps=50), for sharing a setup.
{
  const q = new URLSearchParams(location.search);
  const preset = q.get('preset');
  if (preset) form.applyPreset(preset);
  const values: Record<string, string> = {};
  for (const [k, v] of q) if (k !== 'preset') values[k] = v;
  if (Object.keys(values).length) form.set(values as never);
}

el.form.addEventListener('submit', (ev) => {
  ev.preventDefault();
  void startTraining();
});
el.pause.addEventListener('click', () => {
  if (!rank || state !== 'running') return;
  paused = !paused;
  if (paused) {
    void rank.api.pause();
    setStatus('Pausing after the current log interval…');
  } else {
    void rank.api.resume();
    setStatus('Training…');
  }
  el.pause.textContent = paused ? 'Resume' : 'Pause';
});
el.stop.addEventListener('click', () => {
  if (!rank || state !== 'running') return;
  void rank.api.stop();
  setStatus('Stopping after the current log interval…');
});
el.sampleAgain.addEventListener('click', async () => {
  if (!rank || !lastCfg) return;
  el.sampleAgain.disabled = true;
  setStatus('Sampling…');
  try {
    el.sample.textContent = await rank.api.sample(Math.max(1, lastCfg.sampleTokens || 200));
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
  if (missing) {
    showUnsupported(missing);
    return;
  }
  rank = startRank((msg) => {
    if (state === 'loading') showUnsupported({ reason: 'error', detail: `The rank worker failed to load: ${msg}` });
  });
  try {
    const dataUrl = new URL(`${import.meta.env.BASE_URL}data/tinyshakespeare.txt`, location.href).href;
    info = await rank.api.init({ dataUrl });
  } catch (e) {
    rank.terminate();
    rank = null;
    showUnsupported(classifyInitError((e as Error).message ?? String(e)));
    return;
  }
  el.adapter.textContent = `GPU: ${info.adapter} · ${info.backend}`;
  el.adapter.title = info.gpuLine;
  logLine(info.gpuLine, 'note');
  logLine(`data: Tiny Shakespeare · ${info.corpusChars.toLocaleString('en')} characters · vocab ${info.vocabSize}`, 'note');
  setStatus('Ready. Choose a setup and press Start training.');
  setState('ready');
}

void boot();
