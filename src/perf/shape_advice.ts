/**
 * Shape advice (docs/design.md#a-performance-model-that-chooses-the-plan; Anthony et al., "The Case for Co-Designing
 * Model Architectures with Hardware", arXiv 2401.14489): the shape choices of a model that waste the device — a width,
 * head count or vocabulary that does not split evenly over tp, per-rank GEMM dimensions that are not multiples of the
 * GEMM tile or of the aligned width, a head size that is not a multiple of 64 (the attention kernel pads it), a
 * micro-batch whose rows leave a tile partly empty — each with the nearest good shape and its predicted gain: the
 * achieved FLOP/s of one micro-batch's compute (step_time.ts microBatchSeconds on the device's rate curve) at the fixed
 * shape over the current one (for a padded vocabulary: the same useful FLOPs done faster).
 */
import { makePlan, type PlanModel, planProblems, rankParams } from '../parallel/plan/plan.ts';
import type { DeviceProfile } from './device_profile.ts';
import type { StepOptions } from './step_memory.ts';
import { microBatchSeconds, modelFlops } from './step_time.ts';

/** One finding: what is wasteful, the fix, and the predicted gain (fraction; undefined when the shape cannot run at all). */
export interface Advice {
  what: 'hidden' | 'heads' | 'head size' | 'vocabulary' | 'micro-batch';
  problem: string;
  fix: string;
  gain?: number;
  fixed: PlanModel;
}

/** Achieved useful FLOP/s of one micro-batch of `m` (batchSize = the micro-batch) split over `tp`, or undefined if tp does not split it. */
function rate(m: PlanModel, tp: number, dev: DeviceProfile, o: StepOptions, useful = m): number | undefined {
  const plan = makePlan({ tp, microBatches: 1 });
  if (planProblems(plan, m).length) return undefined;
  const params = rankParams(makePlan(), useful, 0).dense;
  return modelFlops(useful, params) / microBatchSeconds(plan, m, o, dev);
}

const near = (x: number, q: number) => [Math.floor(x / q) * q, Math.ceil(x / q) * q].filter((y) => y > 0);

/**
 * Every wasteful choice of `model` run with tensor-parallel degree `tp` and micro-batches of
 * `microBatch` sequences on `dev`; empty when the shape is good.
 */
export function adviseShape(
  model: PlanModel,
  tp: number,
  microBatch: number,
  dev: DeviceProfile,
  o: StepOptions,
): Advice[] {
  const m0 = { ...model, batchSize: microBatch }, tile = dev.gemm.tile, out: Advice[] = [];
  const base = rate(m0, tp, dev, o);
  const gainOf = (fixed: PlanModel, useful = fixed) => {
    const r = rate(fixed, tp, dev, o, useful);
    return base !== undefined && r !== undefined ? r / base - 1 : undefined;
  };
  const { nEmbd: h, nHead: a, vocabSize: V, blockSize: s } = model;
  // Width: per-rank GEMM widths h/tp (and 3h/tp, 4h/tp) want whole tiles; keep whole heads.
  if (h % tp !== 0 || (h / tp) % tile !== 0) {
    const options = near(h, tile * tp).map((x) => ({ ...m0, nEmbd: x }));
    const best = options.map((f) => ({ f, g: gainOf(f) })).sort((x, y) => (y.g ?? -1) - (x.g ?? -1))[0];
    out.push({
      what: 'hidden',
      problem: h % tp !== 0
        ? `hidden ${h} is not divisible by tp ${tp}`
        : `hidden/tp = ${h / tp} is not a multiple of the ${tile}-wide GEMM tile`,
      fix: `hidden ${options.map((f) => f.nEmbd).join(' or ')} (a multiple of tile × tp = ${tile * tp})`,
      gain: best?.g,
      fixed: best?.f ?? options[0],
    });
  }
  if (a % tp !== 0) {
    const heads = near(a, tp).filter((x) => h % x === 0);
    out.push({
      what: 'heads',
      problem: `heads ${a} are not divisible by tp ${tp}`,
      fix: heads.length
        ? `heads ${heads.join(' or ')}`
        : `a head count that divides both hidden ${h} and a multiple of tp ${tp}`,
      fixed: { ...m0, nHead: heads[0] ?? a },
    });
  }
  const hs = h / a;
  if (Number.isInteger(hs) && hs % 64 !== 0) {
    const fixes = near(hs, 64).filter((x) => h % x === 0 && (h / x) % tp === 0).map((x) => ({ ...m0, nHead: h / x }));
    const scored = fixes.map((f) => ({ f, g: gainOf(f) })).sort((x, y) => (y.g ?? -1) - (x.g ?? -1));
    out.push({
      what: 'head size',
      problem: `head size ${h}/${a} = ${hs} is not a multiple of 64${hs % 8 ? ' (nor of 8: misaligned)' : ''}`,
      fix: scored.length
        ? scored.map(({ f }) => `head size ${h / f.nHead} (${f.nHead} heads)`).join(' or ')
        : `a head count giving a head size that is a multiple of 64`,
      gain: scored[0]?.g,
      fixed: scored[0]?.f ?? m0,
    });
  }
  // Vocabulary: the LM head's per-rank width V/tp (Megatron pads V to a multiple of 128·tp).
  const q = tile * tp;
  if (V % q !== 0) {
    const padded = Math.ceil(V / q) * q, fixed = { ...m0, vocabSize: padded };
    out.push({
      what: 'vocabulary',
      problem: `vocabulary ${V} is not a multiple of tile × tp = ${q}${
        (V / tp) % dev.gemm.align ? ' (per-rank width misaligned)' : ''
      }`,
      fix: `pad the vocabulary to ${padded} (${padded - V} unused rows)`,
      gain: gainOf(fixed, m0),
      fixed,
    });
  }
  if ((microBatch * s) % tile !== 0) {
    const b = Math.ceil(tile / gcd(s, tile)), fixed = { ...m0, batchSize: Math.ceil(microBatch / b) * b };
    out.push({
      what: 'micro-batch',
      problem: `micro-batch rows ${microBatch}·${s} = ${microBatch * s} are not a multiple of the ${tile}-row tile`,
      fix: `micro-batch ${fixed.batchSize} (a multiple of ${b})`,
      gain: gainOf(fixed),
      fixed,
    });
  }
  return out;
}

const gcd = (a: number, b: number): number => (b ? gcd(b, a % b) : a);
