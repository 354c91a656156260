/**
 * Checkpoints of parallel runs: each rank saves the training state it owns — its shard's values
 * and AdamW moments, or its ZeRO pieces — as one safetensors file, the way Megatron-LM's
 * `mp_rank_XX` / DeepSpeed's `zero_pp_rank_X_mp_rank_XX_optim_states` files split a checkpoint
 * by rank. Everything else a step needs is a function of the step index (learning rate, AdamW's
 * bias-correction t, the batches (seed, step) in the recorded batch order), so the state plus the step resumes the
 * run exactly. Files are tied to the plan: a resumed run must use the same one (resharding a
 * checkpoint for another plan is not implemented). Runtime-neutral: bytes in, bytes out; the
 * CLI writes them (src/io/checkpoint_set.ts).
 */
import type { Gpu } from '../../gpu/context.ts';
import type { Tensor } from '../../gpu/tensor.ts';
import { z } from 'zod';
import {
  checkWholeNumbers,
  CorruptCheckpointError,
  type DecodeOptions,
  decodeSafetensors,
  encodeSafetensors,
} from '../../util/safetensors.ts';
import { zodIssues } from '../../util/digest.ts';
import { type LossScaleState, LossScaleStateSchema } from '../../train/loss_scale.ts';
import { describePlan, type ParallelPlan, planWorldSize } from '../plan/plan.ts';
import { BATCH_ORDER } from '../../data/dataset.ts';

export const RANK_CHECKPOINT_FORMAT = 'webgpu-train-sandbox/parallel-rank/1';

/** What identifies a rank's file: the run's plan and config, the rank, and the next step. */
export interface RankCheckpointMeta {
  plan: ParallelPlan;
  /** The trainer's config as the rank saw it (JSON-clean). */
  config: Record<string, unknown>;
  rank: number;
  worldSize: number;
  /** The next optimizer step (steps 0 … step−1 are done). */
  step: number;
  /** The trainer kind (plan.ts StrategyKind). */
  kind: string;
  /** f16-mixed: the loss scaler's state (train/loss_scale.ts), the same on every rank. */
  lossScale?: LossScaleState;
  /**
   * The batch order the run drew its rows in (data/dataset.ts BATCH_ORDER; written as this build's
   * when omitted); undefined on reading a file from before orders were recorded (order 1).
   */
  batchOrder?: number;
}

/**
 * Reads `state` (name → GPU tensor, e.g. `params`, `adam.m`, `zero.m`) and encodes it with `meta`.
 * @throws (rejects with) the GPU's read errors.
 */
export async function encodeRankState(
  gpu: Gpu,
  state: Record<string, Tensor>,
  meta: RankCheckpointMeta,
): Promise<Uint8Array> {
  const host: Record<string, Float32Array> = {};
  for (const [name, t] of Object.entries(state)) host[name] = (await gpu.read(t)) as Float32Array;
  return await encodeRankTensors(host, meta);
}

/** Encodes host copies of a rank's state (name → values) with `meta`: {@link encodeRankState} without the GPU read. */
export async function encodeRankTensors(
  state: Record<string, Float32Array>,
  meta: RankCheckpointMeta,
): Promise<Uint8Array> {
  const tensors = Object.entries(state).map(([name, data]) => ({ name, shape: [data.length], data }));
  return await encodeSafetensors(tensors, {
    format: RANK_CHECKPOINT_FORMAT,
    plan: JSON.stringify(meta.plan),
    config: JSON.stringify(meta.config),
    rank: String(meta.rank),
    world_size: String(meta.worldSize),
    step: String(meta.step),
    kind: meta.kind,
    batch_order: String(meta.batchOrder ?? BATCH_ORDER),
    ...(meta.lossScale ? { loss_scale: JSON.stringify(meta.lossScale) } : {}),
  });
}

/** A decoded rank file; `legacy` when only the old data digest vouched for it. */
export interface LoadedRankState {
  meta: RankCheckpointMeta;
  tensors: Map<string, Float32Array>;
  legacy?: boolean;
}

const count = z.number().int().nonnegative();
const MetaSchema = z.object({
  plan: z.looseObject({ dp: count, tp: count, pp: count, cp: count }),
  config: z.record(z.string(), z.unknown()),
  rank: count,
  worldSize: count.min(1),
  step: count,
  kind: z.string().min(1),
  lossScale: LossScaleStateSchema.optional(),
  batchOrder: count.min(1).optional(),
});

/**
 * Parses one rank's file: the digest (src/util/safetensors.ts), the format, the metadata's
 * shape, and that the rank lies in the world and the world is the plan's.
 * @throws LegacyCheckpointError for a legacy file without `opts.allowLegacy`, and
 *   CorruptCheckpointError (naming `what`) for a damaged file, another format, or unreadable or inconsistent metadata.
 */
export async function decodeRankState(
  bytes: Uint8Array,
  what: string,
  opts: DecodeOptions = {},
): Promise<LoadedRankState> {
  const { tensors, metadata: m, legacy } = await decodeSafetensors(bytes, what, opts);
  if (m.format !== RANK_CHECKPOINT_FORMAT) {
    throw new CorruptCheckpointError(what, `format is '${m.format}', expected '${RANK_CHECKPOINT_FORMAT}'`);
  }
  // batch_order is absent from files written before batch orders were recorded.
  checkWholeNumbers(m, what, ['rank', 'world_size', 'step'], ['batch_order']);
  let raw: Record<string, unknown>;
  try {
    raw = {
      plan: JSON.parse(m.plan),
      config: JSON.parse(m.config),
      rank: Number(m.rank),
      worldSize: Number(m.world_size),
      step: Number(m.step),
      kind: m.kind,
      ...(m.batch_order === undefined ? {} : { batchOrder: Number(m.batch_order) }),
      ...(m.loss_scale === undefined ? {} : { lossScale: JSON.parse(m.loss_scale) }),
    };
  } catch (e) {
    throw new CorruptCheckpointError(what, `metadata unreadable: ${(e as Error).message}`);
  }
  const parsed = MetaSchema.safeParse(raw);
  if (!parsed.success) throw new CorruptCheckpointError(what, `metadata malformed: ${zodIssues(parsed.error)}`);
  const meta = { ...parsed.data, plan: raw.plan } as RankCheckpointMeta;
  if (meta.rank >= meta.worldSize) {
    throw new CorruptCheckpointError(what, `rank ${meta.rank} is outside its world of ${meta.worldSize} ranks`);
  }
  const planned = planWorldSize(meta.plan);
  if (planned !== meta.worldSize) {
    throw new CorruptCheckpointError(what, `world size ${meta.worldSize} is not its plan's ${planned} ranks`);
  }
  return { meta, tensors: new Map([...tensors].map(([k, t]) => [k, t.data])), legacy };
}

/**
 * Checks that `loaded` belongs to this rank of this run and writes it into `state`. Returns the
 * step to continue from. The batch order is not checked here: the host checked it once, when it loaded
 * the set (io/checkpoint_set.ts loadCheckpointSet, data/dataset.ts checkBatchOrder), before any rank received it.
 * @throws Error when the file was written by another plan, rank or trainer ("resume with the
 *   same plan"), and CorruptCheckpointError when a tensor is missing or has another length.
 */
export function restoreRankState(
  gpu: Gpu,
  state: Record<string, Tensor>,
  loaded: LoadedRankState,
  expect: Omit<RankCheckpointMeta, 'step' | 'config'>,
  what: string,
): number {
  const { meta } = loaded;
  const same = JSON.stringify(meta.plan) === JSON.stringify(expect.plan);
  if (!same || meta.worldSize !== expect.worldSize || meta.kind !== expect.kind) {
    throw new Error(
      `${what} was written by '${
        describePlan(meta.plan)
      }' (${meta.kind} trainer, ${meta.worldSize} ranks); this run is '${
        describePlan(expect.plan)
      }' (${expect.kind}, ${expect.worldSize}): resume with the same plan`,
    );
  }
  if (meta.rank !== expect.rank) {
    throw new Error(`${what} holds rank ${meta.rank}'s state, loaded on rank ${expect.rank}`);
  }
  for (const [name, t] of Object.entries(state)) {
    const data = loaded.tensors.get(name);
    if (!data) throw new CorruptCheckpointError(what, `tensor '${name}' is missing`);
    if (data.length !== t.size) {
      throw new CorruptCheckpointError(
        what,
        `tensor '${name}' has ${data.length} elements, this rank's buffer ${t.size}`,
      );
    }
  }
  for (const [name, t] of Object.entries(state)) gpu.write(t, loaded.tensors.get(name)!);
  return meta.step;
}
