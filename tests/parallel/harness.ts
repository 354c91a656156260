/**
 * Shared by the data-parallel and ZeRO tests: the tiny run both sides train, the single-rank
 * reference (the unchanged Trainer in the test process), and worlds of tests/parallel/dp.worker.ts.
 */
import '../util/plane.ts';
import type { DataPlane } from '../../src/comm/data_plane.ts';
import type { World } from '../../src/comm/launch.ts';
import { chunkOffsets } from '../../src/comm/algorithms.ts';
import { parseConfig, type TrainConfig } from '../../src/train/config.ts';
import { createModel } from '../../src/models/registry.ts';
import { Trainer } from '../../src/train/trainer.ts';
import { CharTokenizer } from '../../src/data/tokenizer.ts';
import { TextDataset } from '../../src/data/dataset.ts';
import type { Gpu } from '../../src/gpu/context.ts';
import type { Sent } from '../../src/parallel/mesh/traffic.ts';
import type { ZeroMemory } from '../../src/parallel/zero/zero_pieces.ts';
import { withRankWorld } from '../comm/world.ts';
import { recordRows } from './rows.ts';
import { plainConfig } from './mesh_rank.ts';

/** The first 4 KB of Tiny Shakespeare: enough for 16-token windows, small enough to ship to workers. */
export const TEXT = (await Deno.readTextFile(new URL('../../public/data/tinyshakespeare.txt', import.meta.url))).slice(
  0,
  4096,
);

/** Tiny GPT, 10 steps; clip 0.5 so clipping is active on early steps (the tests check it is). */
export function tinyConfig(over: Partial<TrainConfig> = {}): Partial<TrainConfig> {
  return {
    nLayer: 2,
    nHead: 2,
    nEmbd: 32,
    blockSize: 16,
    batchSize: 4,
    steps: 10,
    warmup: 2,
    lr: 1e-2,
    minLr: 1e-3,
    gradClip: 0.5,
    logInterval: 10,
    ...over,
  };
}

export interface RunArgs {
  cfg: Partial<TrainConfig>;
  text: string;
  /** ZeRO stage; absent = plain data parallelism. */
  stage?: number;
  bucketBytes?: number | 'layer';
  /** Record the token rows of every training forward (RunResult.rows). */
  recordRows?: boolean;
}

export interface RunResult {
  losses: number[];
  gradNorms: number[];
  /** Per step: elements this rank sent, by `group/op`. */
  sent: Sent[];
  /** Per step: buckets launched from inside backward. */
  launched: number[];
  order: number[][];
  /** Bucket lengths n_k in elements. */
  buckets: number[];
  /** Averaged flat gradient of step 0 (rank 0; gathered under ZeRO). */
  grads0?: Float32Array;
  /** Final flat parameters (rank 0). */
  params: Float32Array | null;
  /** Flat buffer length Ψ_flat. */
  flat: number;
  shard: number;
  memory?: ZeroMemory;
  /** With RunArgs.recordRows: this rank's tokens of each micro-batch, in step order (see rows.ts). */
  rows?: number[][];
}

/**
 * The single-rank run: the unchanged Trainer on the whole global batch of `over` (batchSize ×
 * gradAccum rows) in one micro-batch (mesh_rank.ts plainConfig), the baseline of every split of
 * it; `rows` holds one flat (G·T) array per step.
 */
export async function reference(
  gpu: Gpu,
  over: Partial<TrainConfig>,
): Promise<{ losses: number[]; gradNorms: number[]; params: Float32Array; grads0: Float32Array; rows: number[][] }> {
  const cfg: TrainConfig = parseConfig(plainConfig(over));
  const tok = CharTokenizer.fromText(TEXT);
  const data = new TextDataset(tok.encode(TEXT), cfg.blockSize);
  const model = createModel(gpu, cfg, tok.vocabSize);
  const rows = recordRows(model);
  const trainer = new Trainer(gpu, model, data, cfg);
  await trainer.step(0);
  // The gradients stay in the flat buffer until the next step zeroes them.
  const grads0 = (await gpu.read(model.params.grads) as Float32Array).slice();
  for (let s = 1; s < cfg.steps; s++) await trainer.step(s);
  const recs = await trainer.drain();
  const params = await gpu.read(model.params.values) as Float32Array;
  model.params.destroy();
  return { losses: recs.map((r) => r.loss), gradNorms: recs.map((r) => r.gradNorm), params, grads0, rows };
}

/** Launches `size` dp workers (see {@link withRankWorld}) on `dataPlane` (default: shared where usable). */
export const withDpWorld = <T>(size: number, body: (w: World) => Promise<T>, dataPlane?: DataPlane): Promise<T> =>
  withRankWorld('dp.worker.ts', size, body, dataPlane);

/** Elements rank r sends in a ring allReduce of n elements over p ranks (algorithms.ts: every chunk but r in reduce-scatter, every chunk but r+1 in all-gather). */
export function ringAllReduceSent(n: number, p: number, r: number): number {
  const o = chunkOffsets(n, p);
  const len = (i: number) => o[(i % p) + 1] - o[i % p];
  return p === 1 ? 0 : 2 * n - len(r) - len(r + 1);
}

/** Deno.test options for tests that start workers. */
export const WORKER_TEST = { sanitizeResources: false, sanitizeOps: false };

/**
 * max |a−b| / max(|b|, tiny) over two per-step series.
 * @throws Error for an empty series or series of different lengths: a run that stopped early
 *   (or logged nothing) must not pass a parity check on the steps both happen to have.
 */
export function maxRel(a: number[], b: number[]): number {
  if (!a.length || !b.length) throw new Error(`maxRel: empty series (${a.length} vs ${b.length} steps)`);
  if (a.length !== b.length) throw new Error(`maxRel: ${a.length} steps vs ${b.length} in the reference`);
  return Math.max(...a.map((x, i) => Math.abs(x - b[i]) / Math.max(Math.abs(b[i]), 1e-30)));
}
