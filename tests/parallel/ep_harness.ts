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
import { createModel, createMoEModel } from '../../src/models/registry.ts';
import { shardKind, unshardParam } from '../../src/parallel/tensor/tp_table.ts';
import type { Sent } from '../../src/parallel/mesh/traffic.ts';
import { choiceDemand, type RankRouting } from '../../src/parallel/expert/moe_routing.ts';
import { makePlan, type ParallelPlan, planMesh } from '../../src/parallel/plan/plan.ts';
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

/**
 * The single-rank run: Trainer on the whole global batch, tokens routed in `groups` groups. Unlike
 * the dense plans' plain baseline (mesh_rank.ts plainConfig) it keeps the plan's micro-batches as
 * gradAccum: a MoE layer routes, caps and balances each micro-batch's tokens as a group, so the
 * split is part of the model's arithmetic (the rows are the same either way, data/dataset.ts).
 */
export async function epReference(
  gpu: Gpu,
  args: EpArgs,
  groups: number,
): Promise<
  {
    losses: number[];
    gradNorms: number[];
    grads0: Record<string, Float32Array>;
    params: Record<string, Float32Array>;
    /** Per step: each group's demand per (expert, choice) of every MoE forward, keyed {@link demandKey}. */
    demands: Map<string, number[]>[];
  }
> {
  const { cfg, vocabSize, data } = epData(args);
  const model = createMoEModel(gpu, cfg, vocabSize, { groups });
  const trainer = new Trainer(gpu, model, data, cfg);
  const { nExpert: e, moeTopK: k } = cfg, demands: Map<string, number[]>[] = [];
  let grads0: Record<string, Float32Array> = {};
  for (let s = 0; s < cfg.steps; s++) {
    const reads: { layer: number; top: Promise<ArrayLike<number>> }[] = [];
    model.moeLayers.onRoute = (layer, r) => reads.push({ layer, top: gpu.read(r.top) });
    await trainer.step(s);
    model.moeLayers.onRoute = null;
    const step = new Map<string, number[]>(), micro = new Map<number, number>();
    for (const r of reads) {
      const top = await r.top, m = micro.get(r.layer) ?? 0, per = top.length / groups;
      micro.set(r.layer, m + 1);
      for (let g = 0; g < groups; g++) {
        step.set(demandKey(r.layer, m, g), choiceDemand(Array.from(top).slice(g * per, (g + 1) * per), e, k));
      }
    }
    demands.push(step);
    if (s === 0) grads0 = byName(model, Float32Array.from(await gpu.read(model.params.grads)));
  }
  const recs = await trainer.drain();
  const params = byName(model, Float32Array.from(await gpu.read(model.params.values)));
  model.params.destroy();
  return { losses: recs.map((r) => r.loss), gradNorms: recs.map((r) => r.gradNorm), grads0, params, demands };
}

/** The key of one group's demand in one MoE forward: block, micro-batch, group. */
export const demandKey = (layer: number, micro: number, group: number): string => `${layer}/${micro}/${group}`;

/** The mesh ranks' demands of one step (moe_routing.ts RankRouting; undefined for a rank routing no group), keyed {@link demandKey}. */
export function meshDemands(parts: (RankRouting | undefined)[]): Map<string, number[]> {
  const out = new Map<string, number[]>();
  for (const p of parts) for (const c of p?.calls ?? []) out.set(demandKey(c.layer, c.micro, p!.group), c.demand);
  return out;
}

/** Launches `size` ep workers (see {@link withRankWorld}). */
export const withEpWorld = <T>(size: number, body: (w: World) => Promise<T>): Promise<T> =>
  withRankWorld('ep_worker.ts', size, body);

/** Full parameters: each from the first rank (in world order, tp index 0) holding it, unsharded over its tp group. */
export function gatherShards(
  gpu: Gpu,
  plan: ParallelPlan,
  shards: Record<string, Float32Array>[],
  over: Partial<TrainConfig>,
  V: number,
): Record<string, Float32Array> {
  const mesh = planMesh(plan), out: Record<string, Float32Array> = {};
  const model = createModel(gpu, parseConfig(over), V);
  for (const p of model.params.params) {
    const r = shards.findIndex((s, i) => p.name in s && mesh.coords(i).tp === 0);
    if (r < 0) throw new Error(`no rank holds ${p.name}`);
    const tp = mesh.group('tp', r).map((x) => shards[x][p.name]);
    out[p.name] = unshardParam(plan.tp > 1 ? shardKind(p.name) : 'replicated', tp, p.shape);
  }
  model.params.destroy();
  return out;
}
