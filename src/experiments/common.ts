/**
 * What the experiments share: the run folder, a training loop with periodic evaluation over
 * an existing Trainer, in-memory snapshots of a model (through the checkpoint format, so a
 * continuation starts exactly as `--resume` would), and flag parsing helpers.
 */
import type { Gpu } from '../gpu/context.ts';
import type { StepRecord, Trainer } from '../train/trainer.ts';
import { type Stepper, TrainingLoop } from '../train/loop.ts';
import { DivergenceError } from '../train/finite.ts';
import type { LanguageModel } from '../models/model.ts';
import { loadIntoStore, parseCheckpoint, saveCheckpoint } from '../train/checkpoint.ts';
import type { TrainConfig } from '../train/config.ts';
import type { TokenizerJSON } from '../data/tokenizer.ts';
import type { PlanOptions } from '../parallel/plan/plan_schema.ts';
import { writeAtomic } from '../io/atomic.ts';
import { readCorpus } from '../io/corpus.ts';

/** What an experiment gets from the CLI. */
export interface ExperimentContext {
  gpu: Gpu;
  /** Run folder (created); tables and plots go here. */
  out: string;
  /** Experiment flags as given (`--steps 300` → { steps: '300' }). */
  flags: Record<string, string>;
  log: (line: string) => void;
  /**
   * A parallel training run into its own folder (cli/train_parallel.ts `trainParallel`, as
   * `npm run train` with those flags), passed in because a command sits above the experiments
   * (docs/design.md#layers); resolves to the last validation loss.
   */
  trainParallel: (o: ParallelRunOptions) => Promise<number | null>;
}

/** A parallel run an experiment asks for: its plan, its training config and its folder. */
export interface ParallelRunOptions {
  /** The plan's options (parallel/plan/plan_schema.ts PlanSchema keys: degrees, micro-batches, compress, sync, net, …). */
  plan: Partial<PlanOptions>;
  /** Training config values over the tiny preset (TrainConfig keys). */
  config: Partial<TrainConfig>;
  /** The run directory (metrics.jsonl, trace.json, config.json, plan.txt, accounting.json, checkpoints). */
  out: string;
  /** The ranks' WebGPU implementation (default auto). */
  gpu?: 'auto' | 'wgpu' | 'dawn';
}

/** An experiment: `run` writes its files into ctx.out and returns the markdown summary it wrote. */
export interface Experiment {
  name: string;
  /** One paragraph for --help: what it compares, and its flags with defaults. */
  help: string;
  run(ctx: ExperimentContext): Promise<string>;
}

/** One evaluation: the step it was taken after and named values (losses, scores). */
export type EvalPoint = { step: number } & Record<string, number>;

/**
 * Trains steps [from, to) with `trainer` through the training loop (train/loop.ts), calling
 * `evaluate` before the first step, every `every` steps and after the last; returns the
 * evaluations and the training losses.
 * @throws Error naming `label` when a loss is not finite (the run diverged).
 */
export async function trainWithEvals(
  trainer: Trainer,
  from: number,
  to: number,
  every: number,
  evaluate: (step: number) => Promise<Record<string, number>>,
  log: (line: string) => void,
  label: string,
): Promise<{ evals: EvalPoint[]; losses: [number, number][] }> {
  const evals: EvalPoint[] = [{ step: from, ...(await evaluate(from)) }];
  const losses: [number, number][] = [];
  const t0 = performance.now();
  const stepper: Stepper<StepRecord, EvalPoint> = {
    step: (s) => trainer.step(s),
    drain: () => trainer.drain(),
    evaluate: async (step) => ({ step: step + 1, ...(await evaluate(step + 1)) }),
  };
  await labelled(label, () =>
    new TrainingLoop(stepper, {
      start: from,
      end: to,
      logInterval: every,
      evalInterval: every,
      hooks: {
        record: (r) => void losses.push([r.step, r.loss]),
        eval: (_, e) => {
          evals.push(e);
          const vals = Object.entries(e).filter(([k]) => k !== 'step').map(([k, v]) => `${k} ${v.toFixed(4)}`).join(
            ' · ',
          );
          log(`${label} step ${e.step}/${to} · ${vals} · ${((performance.now() - t0) / 1000).toFixed(0)} s`);
        },
      },
    }).run());
  return { evals, losses };
}

/**
 * Trains steps [from, to) with `trainer` through the training loop, without evaluations; the
 * losses are drained and checked every `logInterval` steps and after the last.
 * @throws Error naming `label` when a loss is not finite (the run diverged).
 */
export async function trainSteps(
  trainer: Trainer,
  from: number,
  to: number,
  label: string,
  logInterval = Math.max(1, to - from),
): Promise<StepRecord[]> {
  const recs: StepRecord[] = [];
  const stepper: Stepper<StepRecord> = { step: (s) => trainer.step(s), drain: () => trainer.drain() };
  const loop = new TrainingLoop(stepper, {
    start: from,
    end: to,
    logInterval,
    evalInterval: 0,
    hooks: { record: (r) => void recs.push(r) },
  });
  await labelled(label, () => loop.run());
  return recs;
}

/** Runs `f`; a DivergenceError comes out as an Error that names the experiment's run `label`. */
async function labelled<T>(label: string, f: () => Promise<T>): Promise<T> {
  try {
    return await f();
  } catch (e) {
    if (!(e instanceof DivergenceError)) throw e;
    throw new Error(`${label}: ${e.message}`, { cause: e });
  }
}

/** Parameters and AdamW moments of a model, encoded as a checkpoint (restorable any number of times). */
export async function snapshot(
  model: LanguageModel,
  cfg: TrainConfig,
  tokenizer: TokenizerJSON,
  step: number,
): Promise<Uint8Array> {
  return await saveCheckpoint(model.params, {
    config: cfg,
    tokenizer,
    step,
    dataPosition: { seed: cfg.seed, step },
    rngState: 0,
    valLoss: null,
  });
}

/** Writes a snapshot back into the model. @throws CorruptCheckpointError when it does not fit. */
export async function restore(model: LanguageModel, bytes: Uint8Array): Promise<void> {
  loadIntoStore(model.params, await parseCheckpoint(bytes, 'snapshot'), 'snapshot');
}

/** Reads an integer flag. @throws Error naming the flag when it is not an integer ≥ min. */
export function intFlag(flags: Record<string, string>, name: string, def: number, min = 1): number {
  const v = flags[name];
  if (v === undefined) return def;
  if (!/^\d+$/.test(v) || Number(v) < min) throw new Error(`--${name} expects an integer ≥ ${min}, got '${v}'`);
  return Number(v);
}

/** Reads a number flag. @throws Error naming the flag when it is not a number within [min, max] (or (min, max) when `open`). */
export function numFlag(
  flags: Record<string, string>,
  name: string,
  def: number,
  min: number,
  max = Infinity,
  open = false,
): number {
  const v = flags[name];
  if (v === undefined) return def;
  const n = Number(v);
  const inside = open ? n > min && n < max : n >= min && n <= max;
  if (v.trim() === '' || !Number.isFinite(n) || !inside) {
    throw new Error(`--${name} expects a number ${open ? 'strictly ' : ''}between ${min} and ${max}, got '${v}'`);
  }
  return n;
}

/** Reads a comma-separated list of numbers. @throws Error naming the flag for an entry that is not a number ≥ min. */
export function listFlag(flags: Record<string, string>, name: string, def: number[], min = 0): number[] {
  const v = flags[name];
  if (v === undefined) return def;
  const out = v.split(',').map((s) => Number(s.trim()));
  if (!v.trim() || out.some((n) => !Number.isFinite(n) || n < min)) {
    throw new Error(`--${name} expects comma-separated numbers ≥ ${min}, got '${v}'`);
  }
  return out;
}

/** Reads a shipped corpus (public/data/NAME), without its byte-order mark. */
export function corpus(name: string): Promise<string> {
  return readCorpus(`public/data/${name}`);
}

/** Writes a text file into the run folder, atomically. */
export async function writeOut(ctx: ExperimentContext, name: string, text: string): Promise<void> {
  await writeAtomic(`${ctx.out}/${name}`, new TextEncoder().encode(text));
}

/** The model-shape flags every experiment takes, with its own defaults. */
export function modelFlags(
  flags: Record<string, string>,
  d: { nLayer: number; nEmbd: number; nHead: number; blockSize: number; batchSize: number },
) {
  return {
    nLayer: intFlag(flags, 'n-layer', d.nLayer),
    nEmbd: intFlag(flags, 'n-embd', d.nEmbd),
    nHead: intFlag(flags, 'n-head', d.nHead),
    blockSize: intFlag(flags, 'block-size', d.blockSize),
    batchSize: intFlag(flags, 'batch-size', d.batchSize),
    evalBatches: intFlag(flags, 'eval-batches', 4),
    seed: intFlag(flags, 'seed', 1337, 0),
  };
}

/** A plan's options as the `npm run train` flags that ask for them (`{ dp: 2, sp: true }` → `--dp 2 --sp`), for tables and logs. */
export function planFlagText(plan: Partial<PlanOptions>): string {
  return Object.entries(plan).flatMap(([k, v]) => {
    const flag = `--${k.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`;
    return v === undefined ? [] : v === true ? [flag] : [`${flag} ${v}`];
  }).join(' ');
}

/** Reads `--gpu` for the ranks of a parallel run. @throws Error when it is not auto, wgpu or dawn. */
export function gpuFlag(flags: Record<string, string>): ParallelRunOptions['gpu'] {
  const v = flags.gpu;
  if (v === undefined || v === 'auto' || v === 'wgpu' || v === 'dawn') return v;
  throw new Error(`--gpu must be one of auto, wgpu, dawn, got '${v}'`);
}
