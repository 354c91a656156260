/**
 * One rank = one Worker = one GPUDevice (docs/design.md#ranks-and-the-collective-layer). The control plane is comlink:
 * the page (or a Deno host) wraps this worker and calls {@link RankWorkerApi}; progress comes back through a
 * `Comlink.proxy` callback. Two ways in:
 *
 * - alone (world size 1, the browser demo): {@link RankApi} (its types: rank_api.ts) — init, train,
 *   pause/resume/stop, sample;
 * - as one rank of a world (`World.launch` in src/comm/launch.ts, `spawn`ing this file): the
 *   {@link RankControl} half — `join` takes the rank's MessagePort mesh and builds its
 *   Communicator, `run` executes the named tasks of src/comm/scenarios.ts (the collective test
 *   matrix), src/comm/timing.ts (single collectives, benchmark loops) and src/parallel/run/run_tasks.ts
 *   (parallel training: `trainRank`, or `trainStart` / `trainSteps` / `trainEnd` to stream
 *   progress), `trace` returns its spans.
 *
 * Runtime-neutral on purpose: no Deno APIs and no Vite-only syntax (`import.meta.env`, `?raw`),
 * so the same file runs bundled by Vite in a browser and as a Deno module worker. The host
 * passes the corpus location (`dataUrl`) or the text itself.
 */
import * as Comlink from 'comlink';
import { Gpu } from '../src/gpu/context.ts';
import type { Backend } from '../src/gpu/device.ts';
import { CharTokenizer } from '../src/data/tokenizer.ts';
import { TextDataset } from '../src/data/dataset.ts';
import { createModel } from '../src/models/registry.ts';
import { type StepRecord, Trainer } from '../src/train/trainer.ts';
import { type Stepper, TrainingLoop } from '../src/train/loop.ts';
import { parseConfig, type TrainConfig } from '../src/train/config.ts';
import { mixSeed, Random } from '../src/util/random.ts';
import { type RankControl, rankControl } from '../src/comm/launch.ts';
import { SCENARIO_TASKS } from '../src/comm/scenarios.ts';
import { TIMING_TASKS } from '../src/comm/timing.ts';
import { parallelTasks } from '../src/parallel/run/run_tasks.ts';
import { simActionUs } from '../src/perf/action_prices.ts';
import type { ProgressRecord, RankApi } from './rank_api.ts';

interface Run {
  cfg: TrainConfig;
  trainer: Trainer;
  rng: Random;
}

let gpu: Gpu | null = null;
let gpuUsed = false;
let backend: Backend = 'browser';
let gpuLine = '';
let text = '';
let tokenizer: CharTokenizer | null = null;
let tokens: Int32Array | null = null;
let run: Run | null = null;
let training = false;
let stopRequested = false;
let paused: { promise: Promise<void>; resolve: () => void } | null = null;

async function openGpu(): Promise<Gpu> {
  return await Gpu.create({ backend, log: (line) => (gpuLine = line) });
}

/** A fresh device per run: destroying the last one frees every buffer the last model held. */
async function freshGpu(): Promise<Gpu> {
  if (gpu && !gpuUsed) return gpu;
  run = null;
  gpu?.destroy();
  gpu = null;
  gpu = await openGpu();
  gpuUsed = false;
  return gpu;
}

function requireInit(): { gpu: Gpu; tokenizer: CharTokenizer; tokens: Int32Array } {
  if (!gpu || !tokenizer || !tokens) throw new Error('rank: call init() first');
  return { gpu, tokenizer, tokens };
}

/** A readable adapter name: the description, else vendor and architecture (SwiftShader leaves the description empty). */
function adapterName(g: Gpu): string {
  if (g.adapterDescription) return g.adapterDescription;
  const info = (g.device as GPUDevice & { adapterInfo?: GPUAdapterInfo }).adapterInfo;
  const parts = info ? [info.vendor, info.architecture, info.device].filter((x) => x) : [];
  return parts.length ? parts.join(' ') : 'unknown adapter';
}

async function fetchText(url: string): Promise<string> {
  let res: Response;
  try {
    res = await fetch(url);
  } catch (e) {
    throw new Error(`Cannot fetch training data ${url}: ${(e as Error).message}`);
  }
  if (!res.ok) throw new Error(`Cannot fetch training data ${url}: HTTP ${res.status}`);
  return await res.text();
}

async function generate(r: Run, n: number): Promise<string> {
  const tok = requireInit().tokenizer;
  if (n <= 0) return '';
  const prompt = text.includes('\n') ? tok.encode('\n') : new Int32Array([0]);
  return tok.decode(await r.trainer.sample(prompt, n, r.rng));
}

const api: RankApi = {
  async init(opts) {
    backend = opts.backend ?? 'browser';
    const [g, t] = await Promise.all([
      gpu ? Promise.resolve(gpu) : openGpu(),
      opts.text !== undefined
        ? Promise.resolve(opts.text)
        : opts.dataUrl
        ? fetchText(opts.dataUrl)
        : Promise.reject(new Error('rank.init: pass dataUrl or text')),
    ]);
    gpu = g;
    if (!t.length) throw new Error('Training data is empty');
    text = t;
    tokenizer = CharTokenizer.fromText(text);
    tokens = tokenizer.encode(text);
    return {
      adapter: adapterName(g),
      backend: g.backend,
      features: [...g.features],
      gpuLine,
      corpusChars: tokens.length,
      vocabSize: tokenizer.vocabSize,
    };
  },

  async train(input, onProgress) {
    if (training) throw new Error('rank: a run is already in progress');
    training = true;
    stopRequested = false;
    const t0 = performance.now();
    const emit = (rec: ProgressRecord) => {
      // Fire and forget: comlink keeps the order; a host that went away must not end the run.
      Promise.resolve(onProgress?.(rec)).catch(() => {});
    };
    try {
      const { tokenizer: tok, tokens: ids } = requireInit();
      const cfg = parseConfig({ ...input });
      emit({ kind: 'status', text: 'opening device' });
      const g = await freshGpu();
      gpuUsed = true;
      const data = new TextDataset(ids, cfg.blockSize, cfg.valFraction, 'training data');
      const model = createModel(g, cfg, tok.vocabSize);
      const trainer = new Trainer(g, model, data, cfg);
      run = { cfg, trainer, rng: new Random(mixSeed(cfg.seed, 0x5a3d1e)) };
      emit({
        kind: 'status',
        text: `model: ${model.describe()} · ${(model.numParams() / 1e6).toFixed(3)}M params · vocab ${tok.vocabSize}`,
      });

      const tokensPerStep = cfg.batchSize * cfg.blockSize * cfg.gradAccum;
      let firstLoss: number | null = null;
      let finalLoss: number | null = null;
      let valLoss: number | null = null;
      const stepper: Stepper<StepRecord, number | null> = {
        step: (s) => trainer.step(s),
        drain: () => trainer.drain(),
        // A stop skips the evaluation it would have ended on.
        evaluate: async () => (stopRequested ? null : await trainer.evaluate('val')),
      };
      const { done } = await new TrainingLoop(stepper, {
        start: 0,
        end: cfg.steps,
        logInterval: cfg.logInterval,
        evalInterval: cfg.evalInterval,
        shouldStop: () => stopRequested,
        hooks: {
          log: (recs, ms) => {
            const r = recs[recs.length - 1];
            firstLoss ??= recs[0].loss;
            finalLoss = r.loss;
            emit({
              kind: 'train',
              step: r.step,
              loss: r.loss,
              gradNorm: r.gradNorm,
              lr: r.lr,
              ms,
              tokensPerSec: (tokensPerStep * 1000) / ms,
              points: recs.map((x) => [x.step, x.loss]),
            });
          },
          eval: (step, v) => {
            if (v === null) return;
            valLoss = v;
            emit({ kind: 'eval', step, valLoss });
          },
          boundary: async (done) => {
            if (!paused) return;
            emit({ kind: 'status', text: `paused after step ${done - 1}` });
            await paused.promise;
          },
        },
      }).run();
      const stopped = stopRequested && done < cfg.steps;
      let sample = '';
      if (!stopped && cfg.sampleTokens > 0) {
        emit({ kind: 'status', text: `sampling ${cfg.sampleTokens} tokens` });
        sample = await generate(run, cfg.sampleTokens);
      }
      return {
        steps: done,
        stopped,
        firstLoss,
        finalLoss,
        valLoss,
        sample,
        params: model.numParams(),
        ms: performance.now() - t0,
      };
    } finally {
      training = false;
      paused = null;
      const release = (onProgress as unknown as Record<symbol, unknown> | undefined)?.[Comlink.releaseProxy];
      if (typeof release === 'function') release.call(onProgress);
    }
  },

  pause() {
    if (!paused) {
      let resolve!: () => void;
      const promise = new Promise<void>((r) => (resolve = r));
      paused = { promise, resolve };
    }
  },

  resume() {
    paused?.resolve();
    paused = null;
  },

  stop() {
    stopRequested = true;
    api.resume();
  },

  async sample(n) {
    if (!run) throw new Error('rank: nothing trained yet');
    if (training) throw new Error('rank: wait for the run to end before sampling');
    return await generate(run, n);
  },
};

/** Everything this worker answers: the single-rank training API and the world-rank control API. */
export type RankWorkerApi = RankApi & RankControl;

const { world: _world, ...control } = rankControl({
  ...SCENARIO_TASKS,
  ...TIMING_TASKS,
  ...parallelTasks(simActionUs),
});
const exposed: RankWorkerApi = { ...api, ...control };
Comlink.expose(exposed);
