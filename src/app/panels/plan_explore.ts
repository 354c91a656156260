/**
 * The Plan explorer's model (docs/design.md#a-performance-model-that-chooses-the-plan): the performance model's search
 * (src/perf/plan_search.ts) for a model and a cluster the page names, as rows the tab draws —
 * each ranked plan's predicted step time split into the StepPrediction's parts (compute, exposed
 * communication per dimension, bubble, optimizer) and its worst rank's memory split into
 * parameters, gradients, optimizer state and activations against the device's memory. No DOM
 * here: plan_worker.ts runs it off the main thread, tests/app/plan_explore.test.ts under Deno.
 */
import { NetworkModel } from '../../comm/network.ts';
import { rankMemory, zeroMemoryMixed } from '../../perf/memory_cost.ts';
import { makePlan, type ParallelPlan, type PlanModel, rankParams } from '../../parallel/plan/plan.ts';
import { MAX_PLAN_WORLD } from '../../parallel/plan/limits.ts';
import type { Recompute } from '../../models/recompute.ts';
import { DEVICE_PROFILES, type Dtype } from '../../perf/device_profile.ts';
import { rankOfCoords } from '../../perf/dim_traffic.ts';
import { parseModel } from '../../perf/model_presets.ts';
import { type Candidate, searchPlans, shortPlan, whyBest } from '../../perf/plan_search.ts';
import { bandLine } from '../../perf/plan_order.ts';
import { stepMemory, type StepOptions } from '../../perf/step_memory.ts';
import type { StepPrediction } from '../../perf/step_time.ts';

/** What the tab asks for: a model (preset or `layers=…,heads=…` dims), a cluster and the precision. */
export interface ExplorerSpec {
  model: string;
  world: number;
  /** A key of DEVICE_PROFILES. */
  device: string;
  /** A NET_PRESETS name or a parseNetwork description. */
  net: string;
  dtype: Dtype;
  attention: StepOptions['attention'];
  /** Sequences per optimizer step; absent: the preset's. */
  globalBatch?: number;
  /** Rows returned (best first). */
  top?: number;
  /** Equivalence band relative to the best step time; absent: src/perf/plan_order.ts MODEL_ERROR_BAND. */
  band?: number;
}

/** One part of a stacked bar: its key (a CSS class), what the legend calls it, and its value (seconds or bytes). */
export interface Segment {
  key: string;
  label: string;
  value: number;
}

/** One ranked plan as the tab draws it. */
export interface ExplorerRow {
  /** 1 = the predicted best, in plan_order.ts's order (the search's own). */
  rank: number;
  /** Within the model's error band of the best (marked ≈ best). */
  equivalent: boolean;
  label: string;
  plan: ParallelPlan;
  recompute: Recompute;
  step: number;
  mfu: number;
  tflops: number;
  /** Sums to `step`. */
  time: Segment[];
  /** Sums to the worst rank's bytes (`memoryTotal`). */
  memory: Segment[];
  memoryTotal: number;
  memoryStage: 'first' | 'last';
}

export type ExplorerResult =
  | {
    ok: true;
    model: PlanModel & { name: string };
    params: number;
    world: number;
    device: string;
    deviceMemory: number;
    rows: ExplorerRow[];
    enumerated: number;
    valid: number;
    overMemory: number;
    ranked: number;
    /** Set when micro-batch counts were thinned to bound the work (src/perf/plan_space.ts). */
    thinned?: { kept: number; most: number };
    ms: number;
    why: string;
    /** The equivalence band (relative), the plans within it, and the sentence saying so and how plans are ordered. */
    band: number;
    equivalent: number;
    order: string;
  }
  | { ok: false; message: string; noFit: boolean };

/** The parts of a step, in the order the bars stack them. */
export function timeSegments(p: StepPrediction): Segment[] {
  const dims = (['dp', 'tp', 'pp', 'cp', 'ep'] as const).filter((d) => d !== 'ep' || p.exposed.ep > 0);
  return [
    { key: 'compute', label: 'compute', value: p.compute },
    ...dims.map((d) => ({ key: `comm-${d}`, label: `exposed ${d}`, value: p.exposed[d] })),
    { key: 'bubble', label: 'bubble', value: p.bubble },
    { key: 'optimizer', label: 'optimizer', value: p.optimizer },
  ];
}

/**
 * The worst rank's memory (step_memory.ts: the first or the last stage) split as the model states
 * are counted there: bf16 by the ZeRO paper's mixed-precision bytes, f32 by rankMemory.
 */
export function memorySegments(plan: ParallelPlan, model: PlanModel, o: StepOptions): { segments: Segment[]; total: number; stage: 'first' | 'last' } {
  const m = stepMemory(plan, model, o), stage = m.stage === 'first' ? 0 : plan.pp - 1;
  const rank = rankOfCoords(plan, { dp: 0, pp: stage, cp: 0, tp: 0 });
  const s = o.dtype === 'f32' ? rankMemory(plan, model, rank) : zeroMemoryMixed(rankParams(plan, model, rank).dense, plan.dp * plan.cp, plan.zero);
  const segments = [
    { key: 'params', label: 'parameters', value: s.params },
    { key: 'grads', label: 'gradients', value: s.grads },
    { key: 'optimizer', label: 'optimizer state', value: s.optimizer },
    { key: 'activations', label: 'activations', value: m.activations },
  ];
  return { segments, total: m.total, stage: m.stage };
}

/** Percent widths of `segments` on a bar whose full width is `scale`. */
export const segmentWidths = (segments: Segment[], scale: number): number[] => segments.map((s) => (scale > 0 ? (100 * s.value) / scale : 0));

/**
 * Runs the search for `spec` and returns the top rows, or the reason there are none: the input's
 * problem, or the search's own message when no plan is valid or none fits (`noFit`).
 */
export function explorePlans(spec: ExplorerSpec): ExplorerResult {
  let model: PlanModel & { name: string }, net: NetworkModel;
  const dev = DEVICE_PROFILES[spec.device];
  try {
    if (!dev) throw new Error(`unknown device '${spec.device}'; allowed: ${Object.keys(DEVICE_PROFILES).join(', ')}`);
    if (!Number.isInteger(spec.world) || spec.world < 1 || spec.world > MAX_PLAN_WORLD) {
      throw new Error(`world size must be a whole number from 1 to ${MAX_PLAN_WORLD}, got ${spec.world}`);
    }
    const preset = parseModel(spec.model);
    model = { ...preset, batchSize: spec.globalBatch ?? preset.batchSize };
    net = NetworkModel.parse(spec.net);
  } catch (e) {
    return { ok: false, message: (e as Error).message, noFit: false };
  }
  const o = { dtype: spec.dtype, attention: spec.attention };
  let r;
  try {
    r = searchPlans({ model, world: spec.world, dev, net, ...o, band: spec.band });
  } catch (e) {
    const message = (e as Error).message;
    return { ok: false, message, noFit: /^no (plan fits|valid plan)/.test(message) };
  }
  const rows = r.ranked.slice(0, spec.top ?? 10).map((c: Candidate, i): ExplorerRow => {
    const mem = memorySegments(c.plan, model, { ...o, recompute: c.recompute }), x = c.prediction;
    return {
      rank: i + 1, equivalent: c.equivalent, label: shortPlan(c, model), plan: c.plan, recompute: c.recompute, step: x.step, mfu: x.mfu, tflops: x.tflops,
      time: timeSegments(x), memory: mem.segments, memoryTotal: mem.total, memoryStage: mem.stage,
    };
  });
  return {
    ok: true, model, params: rankParams(makePlan(), model, 0).dense, world: spec.world, device: dev.name,
    deviceMemory: dev.memoryBytes, rows, enumerated: r.enumerated, valid: r.valid, overMemory: r.overMemory,
    ranked: r.ranked.length, thinned: r.thinned, ms: r.ms, why: whyBest(r, model),
    band: r.band, equivalent: r.equivalent, order: bandLine(r.equivalent, r.ranked.length, r.band),
  };
}
