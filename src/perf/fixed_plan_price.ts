/**
 * The price of one fixed plan for `npm run plan -- … --device P` (docs/design.md#a-performance-model-that-chooses-the-plan):
 * the step time, MFU, model TFLOP/s per device, the step's breakdown and the worst rank's memory. The figures are
 * step_time.ts predictStep's, called with the parameter count the search uses, so a plan priced here and the same
 * plan ranked by `--search` (plan_search.ts) carry the same StepPrediction; this module only formats it.
 */
import type { NetworkModel } from '../comm/network.ts';
import { compresses } from '../comm/compression.ts';
import { makePlan, type ParallelPlan, type PlanModel, rankParams } from '../parallel/plan/plan.ts';
import type { TrainConfig } from '../train/config.ts';
import { type DeviceProfile, peakFlops } from './device_profile.ts';
import type { StepOptions } from './step_memory.ts';
import { predictStep, type StepPrediction } from './step_time.ts';
import { fmtBytes, pct } from './plan_report.ts';

/** How MFU and TFLOP/s count model FLOPs (step_time.ts modelFlops). */
export const FLOP_COUNT = '6N + 12·L·h·T FLOPs per token (PaLM, arXiv 2204.02311 App. B; recomputation not counted)';

/**
 * What the search prices besides the plan, read from a training config: f32 stays f32, f16-mixed and bf16-mixed are
 * priced at the device's f16/bf16 matrix peak; the recompute mode and attention kernel are the config's.
 */
export function stepOptionsOf(cfg: Pick<TrainConfig, 'precision' | 'recompute' | 'attention'>): StepOptions {
  return { dtype: cfg.precision === 'f32' ? 'f32' : 'bf16', recompute: cfg.recompute, attention: cfg.attention };
}

/**
 * Prices `plan` (valid by plan/rules.ts checkPlan) for the dense GPT `model`: predictStep with the model's
 * parameter count as plan_search.ts searchPlans passes it.
 * @throws Error naming what the step-time model does not cover: experts, ep > 1 or an architecture other than GPT.
 */
export function priceFixedPlan(
  plan: ParallelPlan,
  model: PlanModel,
  o: StepOptions,
  dev: DeviceProfile,
  net: NetworkModel,
): StepPrediction {
  if (model.nExpert || model.layout || plan.ep > 1) {
    throw new Error(
      'the step-time model prices dense GPT plans only (no experts, ep 1, --arch gpt); memory and traffic above still hold',
    );
  }
  return predictStep(plan, model, o, dev, net, rankParams(makePlan(), model, 0).dense);
}

/** Lines on what predictStep leaves out of `plan`: compression and low-communication sync are priced as plain DDP. */
export function unpricedNotes(plan: ParallelPlan): string[] {
  return [
    ...(compresses(plan.compress) ? ['--compress is not priced: every message is priced uncompressed'] : []),
    ...(plan.sync ? ['the low-communication sync is not priced: the dp gradient sync is priced every step'] : []),
  ];
}

/** `--json`'s record: times in ms, MFU a fraction of the device's peak, TFLOP/s per device, memory in bytes. */
export interface PriceJson {
  stepMs: number;
  /** Model FLOPs per step over step time × world size × peak (a fraction, 0…1). */
  mfu: number;
  tflopsPerDevice: number;
  /** How the FLOPs are counted ({@link FLOP_COUNT}). */
  flops: string;
  breakdown: {
    computeMs: number;
    exposedMs: Record<'dp' | 'tp' | 'pp' | 'cp' | 'ep', number>;
    bubbleMs: number;
    bubbleFraction: number;
    optimizerMs: number;
  };
  /** The worst rank (first or last pipeline stage): model states, activations and their sum. */
  memory: { statesBytes: number; activationsBytes: number; totalBytes: number; stage: 'first' | 'last' };
}

/** The prediction as `--json` writes it (seconds → ms). */
export function priceJson(p: StepPrediction): PriceJson {
  const ms = (s: number) => s * 1e3;
  const e = p.exposed;
  return {
    stepMs: ms(p.step),
    mfu: p.mfu,
    tflopsPerDevice: p.tflops,
    flops: FLOP_COUNT,
    breakdown: {
      computeMs: ms(p.compute),
      exposedMs: { dp: ms(e.dp), tp: ms(e.tp), pp: ms(e.pp), cp: ms(e.cp), ep: ms(e.ep) },
      bubbleMs: ms(p.bubble),
      bubbleFraction: p.bubbleFraction,
      optimizerMs: ms(p.optimizer),
    },
    memory: {
      statesBytes: p.memory.states,
      activationsBytes: p.memory.activations,
      totalBytes: p.memory.total,
      stage: p.memory.stage,
    },
  };
}

/** Milliseconds with three significant figures at least. */
const fmtMs = (s: number) => {
  const ms = s * 1e3;
  return ms >= 100 ? `${ms.toFixed(0)} ms` : `${ms.toPrecision(3)} ms`;
};

/**
 * The report's price section: step time, MFU, TFLOP/s per device, the breakdown and the worst rank's memory
 * against the device's; `notes` are lines on what the model leaves out for this plan (compression, say).
 */
export function priceLines(
  p: StepPrediction,
  dev: DeviceProfile,
  o: StepOptions,
  net: NetworkModel,
  notes: string[] = [],
): string[] {
  const e = p.exposed, peak = peakFlops(dev, o.dtype) / 1e12;
  const gib = (b: number) => (b / 2 ** 30).toFixed(2);
  const fits = p.memory.total <= dev.memoryBytes ? 'fits' : 'does NOT fit';
  return [
    `step time on ${dev.name} (${o.dtype}, ${o.attention} attention, recompute ${o.recompute}; ${net}; step_time.ts, the search's pricing):`,
    `  step ${fmtMs(p.step)} · MFU ${pct(p.mfu)} of ${peak.toFixed(1)} TFLOP/s · ${
      p.tflops >= 1 ? p.tflops.toFixed(1) : p.tflops.toPrecision(2)
    } TFLOP/s per device`,
    `  model FLOPs: ${FLOP_COUNT}`,
    `  breakdown: compute ${fmtMs(p.compute)} · exposed dp ${fmtMs(e.dp)}, tp ${fmtMs(e.tp)}, pp ${fmtMs(e.pp)}, cp ${
      fmtMs(e.cp)
    }, ep ${fmtMs(e.ep)} · bubble ${fmtMs(p.bubble)} (${pct(p.bubbleFraction)}) · optimizer ${fmtMs(p.optimizer)}`,
    `  memory of the worst rank (${p.memory.stage} stage; Korthikanti activations): ${
      fmtBytes(p.memory.states)
    } states + ${fmtBytes(p.memory.activations)} activations = ${fmtBytes(p.memory.total)}, ${fits} in ${
      gib(dev.memoryBytes)
    } GiB`,
    ...notes.map((n) => `  note: ${n}`),
  ];
}
