/**
 * Memory per rank for the plan search (docs/design.md#a-performance-model-that-chooses-the-plan): model states from
 * memory_cost.ts (the ZeRO paper's mixed-precision bytes for bf16, this sandbox's fp32 AdamW for f32) and activations
 * by Korthikanti et al.'s per-layer count (arXiv 2205.05198 §4, activation_memory.ts korthikantiLayerBytes) under each
 * recompute mode, times the layers a pipeline rank holds in flight. This is the paper's closed form for any shape, not
 * activation_memory.ts's count of this implementation's tapes, which runs the rank's model over a meta GPU and is too
 * slow to call per plan.
 *
 * Units: bytes.
 */
import { korthikantiLayerBytes } from './activation_memory.ts';
import { rankMemory, zeroMemoryMixed } from './memory_cost.ts';
import { paddedVocab, type ParallelPlan, type PlanModel, rankParams } from '../parallel/plan/plan.ts';
import type { Recompute } from '../models/recompute.ts';
import type { Dtype } from './device_profile.ts';
import { rankOfCoords } from './dim_traffic.ts';

/** What the search needs besides the plan: precision, recomputation and the attention kernel. */
export interface StepOptions {
  dtype: Dtype;
  recompute: Recompute;
  /** flash: FlashAttention keeps no s×s softmax (the 5as/h term goes); naive: it does. */
  attention: 'flash' | 'naive';
}

/**
 * Bytes one layer keeps for its backward per micro-batch of b sequences of s tokens (fp16, as
 * Korthikanti et al. count; ×2 for f32): none sbh(34 + 5as/h) (tp, sp as korthikantiLayerBytes),
 * selective the same without the 5as/h attention term, full only the layer input 2sbh (÷t
 * under sp). FlashAttention never saves the s×s term, so there none equals selective.
 */
export function layerActivationBytes(
  s: number,
  b: number,
  h: number,
  a: number,
  t: number,
  sp: boolean,
  o: StepOptions,
): number {
  const width = o.dtype === 'f32' ? 2 : 1;
  if (o.recompute === 'full') return (width * 2 * s * b * h) / (sp ? t : 1);
  const keepsSoftmax = o.recompute === 'none' && o.attention === 'naive'; // Korthikanti's 5as/h term
  return width * korthikantiLayerBytes(s, b, h, keepsSoftmax ? a : 0, t, sp);
}

/** Memory of the worst rank (the first or the last pipeline stage). */
export interface StepMemory {
  /** Parameters, gradients and optimizer state. */
  states: number;
  activations: number;
  total: number;
  /** 'first' or 'last': the stage the figure is for. */
  stage: 'first' | 'last';
}

/**
 * Peak memory per rank of `plan`: over the first stage (1F1B keeps min(m, p) micro-batches of
 * its L/p layers; interleaved adds (p−1)/v chunk-micro-batches; GPipe keeps all m) and the last
 * (one micro-batch, plus its fp32 logits b·s·V/t·4), the larger of states + activations. Full
 * recomputation adds one layer's un-recomputed activations, live while its backward runs.
 */
export function stepMemory(plan: ParallelPlan, model: PlanModel, o: StepOptions): StepMemory {
  const { dp, pp: P, cp, tp: t, sp, microBatches: m, virtualStages: v } = plan;
  const b = model.batchSize / (dp * m), s = model.blockSize / cp, h = model.nEmbd, a = model.nHead;
  const layer = layerActivationBytes(s, b, h, a, t, sp, o);
  const work = o.recompute === 'full' ? layerActivationBytes(s, b, h, a, t, sp, { ...o, recompute: 'none' }) : 0;
  const L = model.nLayer / P;
  const inFlight = plan.schedule === 'gpipe' ? m : Math.min(m, P) + (plan.schedule === 'interleaved' ? (P - 1) / v : 0);
  const logits = 4 * b * s * (paddedVocab(model.vocabSize, t) / t);
  const firstAct = inFlight * L * layer + work, lastAct = L * layer + work + logits;
  const first = states(plan, model, 0, o), last = states(plan, model, P - 1, o);
  return first + firstAct >= last + lastAct
    ? { states: first, activations: firstAct, total: first + firstAct, stage: 'first' }
    : { states: last, activations: lastAct, total: last + lastAct, stage: 'last' };
}

/** Model-state bytes of pipeline stage `stage`'s rank (dp, cp, tp 0): memory_cost.ts's formulas. */
export function states(plan: ParallelPlan, model: PlanModel, stage: number, o: Pick<StepOptions, 'dtype'>): number {
  const rank = rankOfCoords(plan, { dp: 0, pp: stage, cp: 0, tp: 0 });
  if (o.dtype === 'f32') return rankMemory(plan, model, rank).total;
  const psi = rankParams(plan, model, rank).dense;
  return zeroMemoryMixed(psi, plan.dp * plan.cp, plan.zero).total;
}
