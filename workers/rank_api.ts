/**
 * The single-rank training API of workers/rank.worker.ts: what the page (src/app/rank.ts) calls
 * through comlink and what comes back — init options and device report, the progress records a
 * run streams, the run's summary. Separate from the worker so the page can name the contract
 * without pulling the worker's implementation into its own module graph; type-only, so
 * runtime-neutral like the worker.
 */
import type { Backend } from '../src/gpu/device.ts';
import type { TrainConfig } from '../src/train/config.ts';

/** What {@link RankApi.init} needs. */
export interface RankInitOptions {
  /** Absolute URL of the UTF-8 training text (the page passes `${BASE_URL}data/tinyshakespeare.txt`). */
  dataUrl?: string;
  /** The training text itself, instead of `dataUrl`. */
  text?: string;
  /** WebGPU implementation; `browser` (navigator.gpu) unless a Deno host asks for another. */
  backend?: Backend;
}

/** What {@link RankApi.init} reports. */
export interface RankInfo {
  /** Adapter description (e.g. "SwiftShader Device (Subzero)"), or vendor when empty. */
  adapter: string;
  backend: string;
  features: string[];
  /** The one-line device summary `Gpu.create` logs (limits and features). */
  gpuLine: string;
  /** Characters in the corpus and distinct characters (the char vocabulary). */
  corpusChars: number;
  vocabSize: number;
}

/** Progress records sent to the host's callback, in order. */
export type ProgressRecord =
  | {
    kind: 'train';
    /** 0-based step of the last record in this log interval. */
    step: number;
    loss: number;
    gradNorm: number;
    lr: number;
    /** Wall-clock ms per step over the interval (evaluation excluded). */
    ms: number;
    tokensPerSec: number;
    /** Every step of the interval as [step, loss], for charts. */
    points: [number, number][];
  }
  | { kind: 'eval'; step: number; valLoss: number }
  | { kind: 'status'; text: string };

/** What {@link RankApi.train} resolves to. */
export interface TrainSummary {
  /** Optimizer steps completed. */
  steps: number;
  /** True when {@link RankApi.stop} ended the run early. */
  stopped: boolean;
  firstLoss: number | null;
  finalLoss: number | null;
  valLoss: number | null;
  /** Generated text after training (empty when stopped or sampleTokens is 0). */
  sample: string;
  params: number;
  /** Total wall-clock ms of the run, setup and sampling included. */
  ms: number;
}

export interface RankApi {
  /** Opens the GPU device and loads the corpus. @throws Error naming what is missing (WebGPU, adapter, data). */
  init(opts: RankInitOptions): Promise<RankInfo>;
  /**
   * Trains a GPT on the corpus with `cfg` (validated by `parseConfig`; `cfg.data` is ignored:
   * the corpus is the one given to init). Resolves when the run ends or is stopped.
   * @throws Error for an invalid config, a non-finite loss, or a WebGPU error.
   */
  train(cfg: Partial<TrainConfig>, onProgress?: (rec: ProgressRecord) => void): Promise<TrainSummary>;
  /** Pauses after the current log interval; {@link resume} continues. */
  pause(): void;
  resume(): void;
  /** Ends the current run after the current log interval (no final sample). */
  stop(): void;
  /** `n` tokens from the last trained model, prompted with a newline. */
  sample(n: number): Promise<string>;
}
