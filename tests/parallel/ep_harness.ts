/**
 * Shared by the expert-parallel test and its worker: the tiny MoE run both sides train, the
 * single-rank reference (the unchanged Trainer on a GPTMoE routing in `ep` groups) and worlds
 * of tests/parallel/ep_worker.ts, bundled once per process by tests/dist/world.ts.
 */
import type { World } from '../../src/dist/launch.ts';
import { parseConfig, type TrainConfig } from '../../src/train/config.ts';
import { Trainer } from '../../src/train/trainer.ts';
import { CharTokenizer } from '../../src/data/tokenizer.ts';
import { TextDataset } from '../../src/data/dataset.ts';
import type { Gpu } from '../../src/gpu/context.ts';
import type { GPTConfig } from '../../src/models/gpt.ts';
import { GPTMoE, type MoEConfig } from '../../src/models/moe.ts';
import type { Sent } from '../../src/parallel/traffic.ts';
import { withRankWorld } from '../dist/world.ts';

export interface EpArgs {
  cfg: Partial<TrainConfig>;
  moe: MoEConfig;
  text: string;
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
}

/** GPT shape from a training config and vocabulary. */
export function gptConfig(cfg: TrainConfig, vocabSize: number): GPTConfig {
  return { vocabSize, blockSize: cfg.blockSize, nLayer: cfg.nLayer, nHead: cfg.nHead, nEmbd: cfg.nEmbd, bias: cfg.bias, attention: cfg.attention };
}

/** Flat buffer → {name: values}. */
export function byName(model: GPTMoE, flat: Float32Array): Record<string, Float32Array> {
  return Object.fromEntries(model.params.params.map((p) => [p.name, flat.slice(p.offset, p.offset + p.size)]));
}

/** The single-rank run: Trainer on the whole global batch, tokens routed in `groups` groups. */
export async function epReference(gpu: Gpu, args: EpArgs, groups: number): Promise<{ losses: number[]; gradNorms: number[]; grads0: Record<string, Float32Array>; params: Record<string, Float32Array> }> {
  const cfg = parseConfig(args.cfg);
  const tok = CharTokenizer.fromText(args.text);
  const data = new TextDataset(tok.encode(args.text), cfg.blockSize);
  const model = new GPTMoE(gpu, gptConfig(cfg, tok.vocabSize), { ...args.moe, groups }, cfg.seed);
  const trainer = new Trainer(gpu, model, data, cfg);
  trainer.step(0);
  const grads0 = byName(model, Float32Array.from(await gpu.read(model.params.grads)));
  for (let s = 1; s < cfg.steps; s++) trainer.step(s);
  const recs = await trainer.drain();
  const params = byName(model, Float32Array.from(await gpu.read(model.params.values)));
  model.params.destroy();
  return { losses: recs.map((r) => r.loss), gradNorms: recs.map((r) => r.gradNorm), grads0, params };
}


/** Launches `size` ep workers (see {@link withRankWorld}). */
export const withEpWorld = <T>(size: number, body: (w: World) => Promise<T>): Promise<T> => withRankWorld('ep_worker.ts', size, body);
