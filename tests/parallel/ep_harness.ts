/**
 * Shared by the expert-parallel test and its worker: the tiny MoE runs both sides train (gpt-moe
 * or mamba-moe, named by cfg.arch), the single-rank reference (the unchanged Trainer on the
 * model routing in `groups` token groups) and worlds of tests/parallel/ep_worker.ts, bundled
 * once per process by tests/comm/world.ts.
 */
import type { World } from '../../src/comm/launch.ts';
import { parseConfig, type TrainConfig } from '../../src/train/config.ts';
import { Trainer } from '../../src/train/trainer.ts';
import { CharTokenizer } from '../../src/data/tokenizer.ts';
import { TextDataset } from '../../src/data/dataset.ts';
import type { Gpu } from '../../src/gpu/context.ts';
import type { LanguageModel } from '../../src/models/model.ts';
import { createMoEModel } from '../../src/models/registry.ts';
import type { Sent } from '../../src/parallel/traffic.ts';
import { makePlan, type ParallelPlan } from '../../src/parallel/plan.ts';
import { withRankWorld } from '../comm/world.ts';

export interface EpArgs {
  /** The run's config, arch and MoE keys (nExpert, moeTopK, capacityFactor, auxLossWeight, moeEvery) included. */
  cfg: Partial<TrainConfig>;
  text: string;
  /** Expert-parallel degree; dp is the world size (default ep = dp). */
  ep?: number;
}

export interface EpResult {
  losses: number[];
  gradNorms: number[];
  sent: Sent[];
  /** This rank's synchronised gradients of step 0, by parameter name. */
  grads0: Record<string, Float32Array>;
  /** Parameters after the last step, by name. */
  params: Record<string, Float32Array>;
  /** Dense parameter count Ψ_dense (unpadded). */
  dense: number;
  /** This rank's expert parameter count (unpadded). */
  expert: number;
}

/** Flat buffer → {name: values}. */
export function byName(model: LanguageModel, flat: Float32Array): Record<string, Float32Array> {
  return Object.fromEntries(model.params.params.map((p) => [p.name, flat.slice(p.offset, p.offset + p.size)]));
}

/** The tokenizer and dataset of a run. */
export function epData(args: EpArgs): { cfg: TrainConfig; vocabSize: number; data: TextDataset } {
  const cfg = parseConfig(args.cfg);
  const tok = CharTokenizer.fromText(args.text);
  return { cfg, vocabSize: tok.vocabSize, data: new TextDataset(tok.encode(args.text), cfg.blockSize) };
}

/** The plan of an EP run on `dp` ranks: ep = args.ep (default dp), the config's gradAccum as micro-batches. */
export function epPlan(args: EpArgs, dp: number): ParallelPlan {
  return makePlan({ dp, ep: args.ep ?? dp, microBatches: parseConfig(args.cfg).gradAccum });
}

/** The single-rank run: Trainer on the whole global batch, tokens routed in `groups` groups. */
export async function epReference(
  gpu: Gpu,
  args: EpArgs,
  groups: number,
): Promise<
  { losses: number[]; gradNorms: number[]; grads0: Record<string, Float32Array>; params: Record<string, Float32Array> }
> {
  const { cfg, vocabSize, data } = epData(args);
  const model = createMoEModel(gpu, cfg, vocabSize, { groups });
  const trainer = new Trainer(gpu, model, data, cfg);
  await trainer.step(0);
  const grads0 = byName(model, Float32Array.from(await gpu.read(model.params.grads)));
  for (let s = 1; s < cfg.steps; s++) await trainer.step(s);
  const recs = await trainer.drain();
  const params = byName(model, Float32Array.from(await gpu.read(model.params.values)));
  model.params.destroy();
  return { losses: recs.map((r) => r.loss), gradNorms: recs.map((r) => r.gradNorm), grads0, params };
}

/** Launches `size` ep workers (see {@link withRankWorld}). */
export const withEpWorld = <T>(size: number, body: (w: World) => Promise<T>): Promise<T> =>
  withRankWorld('ep_worker.ts', size, body);
