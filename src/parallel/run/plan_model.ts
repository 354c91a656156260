/**
 * The PlanModel of a run (docs/design.md#parallel-training): what the plan's rules (plan/rules.ts) and the traffic and
 * memory predictions read of a run's config and vocabulary.
 */
import type { TrainConfig } from '../../train/config.ts';
import { MOE_ARCHS, pipelineBlocks } from '../../models/archs.ts';
import type { ArchLayout, ParallelPlan, PlanModel } from '../plan/plan.ts';
import { planProblems } from '../plan/rules.ts';
import { runFactsOf } from '../plan/mesh_plan.ts';
import { derivedRankParams } from '../cost/derived_params.ts';
import { paddedVocabSize, tpVocabConfig } from '../../models/vocab_pad.ts';

/**
 * What the plan's rules (plan/rules.ts) and stepTraffic need from a run config; nExpert and moeEvery only for an
 * EP run of a MoE architecture. `vocabSize` is the tokenizer's; the model's is padded by --pad-vocab to a multiple
 * of padVocab·tp (models/vocab_pad.ts), so memory and traffic count the rows trained.
 * @throws Error for recurrent-depth on a split it does not take: the table's rules that need no model, first.
 */
export function planModelOf(plan: ParallelPlan, cfg: TrainConfig, tokenizerVocab: number): PlanModel {
  // Its rules first: its parameter counts below would fail on a split it does not take with a less direct error.
  if (cfg.arch === 'recurrent-depth') {
    const [first] = planProblems(plan, undefined, undefined, runFactsOf(cfg));
    if (first) throw new Error(first);
  }
  return rankPlanModel(plan, cfg, tokenizerVocab);
}

/** {@link planModelOf} of a plan the host has checked (what a rank builds; no rule is re-run). */
export function rankPlanModel(plan: ParallelPlan, cfg: TrainConfig, tokenizerVocab: number): PlanModel {
  const { nHead, nEmbd, blockSize } = cfg, nLayer = pipelineBlocks(cfg);
  const moe = plan.ep > 1 && (MOE_ARCHS as readonly string[]).includes(cfg.arch);
  const vocabSize = paddedVocabSize(tokenizerVocab, cfg.padVocab, plan.tp);
  const layout = archLayout(tpVocabConfig(cfg, plan.tp), tokenizerVocab);
  return {
    ...(layout ? { layout } : {}),
    nLayer,
    nHead,
    nEmbd,
    blockSize,
    batchSize: cfg.batchSize * cfg.gradAccum,
    vocabSize,
    ...(moe ? { nExpert: cfg.nExpert, moeEvery: cfg.moeEvery } : {}),
  };
}

/**
 * The layout of `cfg.arch` for the planner, or undefined for GPT (plan.ts rankParams counts it by its shape): each
 * rank's parameters counted by building its model (derived_params.ts); the MoE models count their experts apart
 * (`expert`: this rank's E/ep of each MoE block it holds).
 */
function archLayout(cfg: TrainConfig, vocabSize: number): ArchLayout | undefined {
  if (cfg.arch === 'gpt') return undefined;
  return { arch: cfg.arch, params: derivedRankParams(cfg, vocabSize) };
}
