/**
 * Training checkpoints as safetensors: parameters under nanoGPT's names, AdamW moments under
 * `optim.m.NAME` / `optim.v.NAME`, and in the metadata the config, tokenizer, next step,
 * data position, batch order and RNG state — everything a resumed run needs to continue bit-for-bit.
 */
import type { ParamStore } from '../nn/params.ts';
import type { TrainConfig } from './config.ts';
import type { TokenizerJSON } from '../data/tokenizer.ts';
import { z } from 'zod';
import {
  checkWholeNumbers,
  CorruptCheckpointError,
  type DecodeOptions,
  decodeSafetensors,
  encodeSafetensors,
  type NamedTensor,
} from '../util/safetensors.ts';
import { zodIssues } from '../util/digest.ts';
import { type LossScaleState, LossScaleStateSchema } from './loss_scale.ts';
import { BATCH_ORDER } from '../data/dataset.ts';

export const CHECKPOINT_FORMAT = 'webgpu-train-sandbox/gpt/1';

/** What a checkpoint carries besides tensors. */
export interface CheckpointState {
  config: TrainConfig;
  tokenizer: TokenizerJSON;
  /** The next optimizer step to run (steps 0 … step−1 are done). */
  step: number;
  /** Where the data loader is: batches are a function of (seed, step), so this is the step. */
  dataPosition: { seed: number; step: number };
  /**
   * The batch order the run drew its rows in (data/dataset.ts BATCH_ORDER; written as this build's
   * when omitted); undefined on reading a file from before orders were recorded (order 1).
   */
  batchOrder?: number;
  /** State of the sampling RNG. */
  rngState: number;
  /** Best validation loss so far (for summaries). */
  valLoss: number | null;
  /** f16-mixed: the dynamic loss scaler's state (loss_scale.ts); absent otherwise. */
  lossScale?: LossScaleState;
}

/** Reads parameters and moments from the GPU and encodes a checkpoint. */
export async function saveCheckpoint(store: ParamStore, state: CheckpointState): Promise<Uint8Array> {
  const [values, m, v] = await Promise.all([
    store.gpu.read(store.values),
    store.gpu.read(store.m),
    store.gpu.read(store.v),
  ]);
  const tensors: NamedTensor[] = [];
  for (const [prefix, flat] of [['', values], ['optim.m.', m], ['optim.v.', v]] as const) {
    for (const p of store.params) {
      tensors.push({
        name: prefix + p.name,
        shape: p.shape,
        data: (flat as Float32Array).slice(p.offset, p.offset + p.size),
      });
    }
  }
  return encodeCheckpoint(tensors, state);
}

/** Encodes named tensors (parameters, `optim.m.*`, `optim.v.*`) and `state`: {@link saveCheckpoint} without the GPU read. */
export function encodeCheckpoint(tensors: NamedTensor[], state: CheckpointState): Promise<Uint8Array> {
  return encodeSafetensors(tensors, {
    format: CHECKPOINT_FORMAT,
    config: JSON.stringify(state.config),
    tokenizer: JSON.stringify(state.tokenizer),
    step: String(state.step),
    data_position: JSON.stringify(state.dataPosition),
    batch_order: String(state.batchOrder ?? BATCH_ORDER),
    rng_state: String(state.rngState),
    val_loss: JSON.stringify(state.valLoss),
    ...(state.lossScale ? { loss_scale: JSON.stringify(state.lossScale) } : {}),
  });
}

/** A decoded checkpoint: state plus tensors by name. */
export interface LoadedCheckpoint {
  state: CheckpointState;
  tensors: Map<string, NamedTensor>;
}

const count = z.number().int().nonnegative();
/** The metadata values after JSON decoding; strings that must hold integers are checked as text first. */
const StateSchema = z.object({
  config: z.looseObject({ seed: count, steps: count }),
  tokenizer: z.looseObject({ kind: z.string() }),
  step: count,
  dataPosition: z.strictObject({ seed: count, step: count }),
  batchOrder: count.min(1).optional(),
  rngState: count.max(0xffffffff),
  valLoss: z.number().nullable(),
  lossScale: LossScaleStateSchema.optional(),
});

/**
 * Decodes and validates a checkpoint's bytes: the digest (see safetensors.ts), the format, the
 * metadata's shape, and the consistency a hand edit could break — the data position's step and
 * seed are the checkpoint's step and the config's seed, the step is within the config's steps,
 * and every parameter has AdamW moments of its shape (and no moment lacks its parameter).
 * `legacy` is true when only the old data digest vouched for it (allowed by `opts.allowLegacy`).
 * @throws LegacyCheckpointError for a legacy file without `opts.allowLegacy`, and
 *   CorruptCheckpointError (naming `what`) when the bytes, digest, metadata or consistency are wrong.
 */
export async function parseCheckpoint(
  bytes: Uint8Array,
  what: string,
  opts: DecodeOptions = {},
): Promise<LoadedCheckpoint & { legacy: boolean }> {
  const { tensors, metadata, legacy } = await decodeSafetensors(bytes, what, opts);
  if (metadata.format !== CHECKPOINT_FORMAT) {
    throw new CorruptCheckpointError(what, `format is '${metadata.format}', expected '${CHECKPOINT_FORMAT}'`);
  }
  // batch_order is absent from files written before batch orders were recorded.
  checkWholeNumbers(metadata, what, ['step', 'rng_state'], ['batch_order']);
  let raw: Record<string, unknown>;
  try {
    raw = {
      config: JSON.parse(metadata.config),
      tokenizer: JSON.parse(metadata.tokenizer),
      step: Number(metadata.step),
      dataPosition: JSON.parse(metadata.data_position),
      ...(metadata.batch_order === undefined ? {} : { batchOrder: Number(metadata.batch_order) }),
      rngState: Number(metadata.rng_state),
      valLoss: JSON.parse(metadata.val_loss ?? 'null'),
      ...(metadata.loss_scale === undefined ? {} : { lossScale: JSON.parse(metadata.loss_scale) }),
    };
  } catch (e) {
    throw new CorruptCheckpointError(what, `metadata unreadable: ${(e as Error).message}`);
  }
  const parsed = StateSchema.safeParse(raw);
  if (!parsed.success) throw new CorruptCheckpointError(what, `metadata malformed: ${zodIssues(parsed.error)}`);
  const state = { ...parsed.data, config: raw.config, tokenizer: raw.tokenizer } as CheckpointState;
  const { config, dataPosition, step } = parsed.data;
  if (dataPosition.step !== step) {
    throw new CorruptCheckpointError(
      what,
      `data position is at step ${dataPosition.step}, the checkpoint at step ${step}; they must be equal`,
    );
  }
  if (dataPosition.seed !== config.seed) {
    throw new CorruptCheckpointError(
      what,
      `data position seed ${dataPosition.seed} is not the config's seed ${config.seed}`,
    );
  }
  if (step > config.steps) {
    throw new CorruptCheckpointError(what, `step ${step} is past the config's ${config.steps} steps`);
  }
  for (const [name, t] of tensors) {
    const param = name.replace(/^optim\.[mv]\./, '');
    const pair = name === param ? [`optim.m.${name}`, `optim.v.${name}`] : [param];
    for (const other of pair) {
      const o = tensors.get(other);
      if (!o || o.shape.join(',') !== t.shape.join(',')) {
        throw new CorruptCheckpointError(
          what,
          `tensor '${name}' [${t.shape}] has no '${other}' of the same shape (every parameter carries both AdamW moments)`,
        );
      }
    }
  }
  return { state, tensors, legacy };
}

/** The token embeddings (every architecture's), whose rows are the model's (padded) vocabulary. */
const VOCAB_ROWS = /^(transformer\.wte|backbone\.embedding|emb)\.weight$/;

/**
 * Writes a checkpoint's tensors into the parameter store (values and AdamW moments).
 * @throws Error naming both vocabularies when the embedding's row count differs (another
 *   tokenizer or --pad-vocab: a valid checkpoint of another shape, not a corrupt one);
 *   CorruptCheckpointError when a tensor is missing or has another shape.
 */
export function loadIntoStore(store: ParamStore, ckpt: LoadedCheckpoint, what: string): void {
  for (const p of store.params) {
    const t = ckpt.tensors.get(p.name);
    if (VOCAB_ROWS.test(p.name) && t?.shape.length === 2 && t.shape[0] !== p.shape[0] && t.shape[1] === p.shape[1]) {
      throw new Error(
        `checkpoint ${what} has a vocabulary of ${t.shape[0]} embedding rows (padVocab ${
          ckpt.state.config.padVocab ?? 1
        }), the model ${p.shape[0]}: the tokenizer or --pad-vocab differ; resume with the checkpoint's own config`,
      );
    }
  }
  const flat = {
    '': new Float32Array(store.values.size),
    'optim.m.': new Float32Array(store.m.size),
    'optim.v.': new Float32Array(store.v.size),
  };
  for (const [prefix, host] of Object.entries(flat)) {
    for (const p of store.params) {
      const t = ckpt.tensors.get(prefix + p.name);
      if (!t) throw new CorruptCheckpointError(what, `tensor '${prefix + p.name}' is missing`);
      if (t.shape.join(',') !== p.shape.join(',')) {
        throw new CorruptCheckpointError(
          what,
          `tensor '${prefix + p.name}' has shape [${t.shape}], the model expects [${p.shape}]`,
        );
      }
      host.set(t.data, p.offset);
    }
  }
  store.gpu.write(store.values, flat['']);
  store.gpu.write(store.m, flat['optim.m.']);
  store.gpu.write(store.v, flat['optim.v.']);
}

/** Pythia's log-spaced early checkpoints: steps 1, 2, 4, …, 512 (Biderman et al. arXiv 2304.11158 §2). */
export const PYTHIA_EARLY = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512] as const;

/**
 * Whether a checkpoint is written after `done` optimizer steps of a run of `steps`:
 * every `interval` steps (0 = none) and at the end; with the `pythia` schedule also at the
 * log-spaced early steps. Those are kept as separate `ckpt-<done>` files (see
 * {@link keepsCheckpointFile}).
 */
export function isCheckpointStep(
  done: number,
  steps: number,
  interval: number,
  schedule: 'interval' | 'pythia',
): boolean {
  if (done === steps) return true;
  if (interval > 0 && done % interval === 0) return true;
  return schedule === 'pythia' && (PYTHIA_EARLY as readonly number[]).includes(done);
}

/** Whether the checkpoint after `done` steps is also kept as its own `ckpt-<done>` file. */
export function keepsCheckpointFile(
  done: number,
  steps: number,
  interval: number,
  schedule: 'interval' | 'pythia',
): boolean {
  return schedule === 'pythia' && isCheckpointStep(done, steps, interval, schedule);
}

/**
 * Every step a run of `steps` checkpoints at (ascending), for previews and tests.
 * @throws Error when steps is not a positive integer or interval is negative.
 */
export function checkpointSteps(steps: number, interval: number, schedule: 'interval' | 'pythia'): number[] {
  if (!Number.isInteger(steps) || steps < 1) {
    throw new Error(`checkpointSteps: steps must be a positive integer, got ${steps}`);
  }
  if (!Number.isInteger(interval) || interval < 0) {
    throw new Error(`checkpointSteps: interval must be an integer ≥ 0, got ${interval}`);
  }
  const out: number[] = [];
  for (let d = 1; d <= steps; d++) if (isCheckpointStep(d, steps, interval, schedule)) out.push(d);
  return out;
}
