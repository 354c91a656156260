/**
 * The Plan explorer's scaled-down run: a plan the performance model chose for a paper-scale
 * cluster, rebuilt with the same dp / tp / pp / cp degrees, ZeRO stage, sequence parallelism,
 * micro-batches, pipeline schedule and recompute mode on the demo's tiny GPT (at most
 * {@link MAX_SCALED_WORLD} rank workers), and the Setup values that start it through the demo's
 * own parallel run. What cannot be kept (too many ranks, micro-batches or layers, or a
 * combination the mesh trainer does not compose) is changed to the nearest plan that can run,
 * and each change is named. No DOM here: tests/app/plan_scale.test.ts runs it under Deno.
 */
import { type ParallelPlan, planProblems, planWorldSize } from '../../parallel/plan/plan.ts';
import { runFactsOf } from '../../parallel/plan/mesh_plan.ts';
import { MAX_RUN_WORLD } from '../../parallel/plan/limits.ts';
import { NET_PRESETS, parseNetwork } from '../../comm/network.ts';
import { parseConfig } from '../../train/config.ts';
import type { Recompute } from '../../models/recompute.ts';
import { planFields } from './plan_fields.ts';

/** Rank workers a scaled-down run starts (each opens its own WebGPU device). */
export const MAX_SCALED_WORLD = 8;
/** Micro-batches per step of a scaled-down run (each one a forward and backward per stage). */
export const MAX_SCALED_MICRO_BATCHES = 8;
/** Transformer blocks of the tiny model (pp · virtual stages of them at least). */
export const MAX_SCALED_LAYERS = 8;
/** Characters of Tiny Shakespeare: the tiny model's vocabulary, for the checks. */
const VOCAB = 65;

/** The tiny model a scaled-down plan trains (Setup form values). */
export interface TinyModel {
  nLayer: number;
  nHead: number;
  nEmbd: number;
  blockSize: number;
  /** The global batch: sequences per optimizer step (the Setup's batch with gradAccum 1). */
  batchSize: number;
}

/** A plan ready to train on the tiny model, with what had to change. */
export interface ScaledRun {
  plan: ParallelPlan;
  recompute: Recompute;
  model: TinyModel;
  world: number;
  /** One sentence per change from the chosen plan; empty: it runs exactly as chosen. */
  changes: string[];
}

type Degree = 'dp' | 'cp' | 'pp' | 'tp';
/** Ties in degree reduction lose dp first: it changes the per-rank work least. */
const REDUCE_ORDER: Degree[] = ['dp', 'cp', 'pp', 'tp'];
const smallestFactor = (n: number) => [2, 3, 5, 7].find((f) => n % f === 0) ?? n;

/**
 * `plan` (with `recompute`) as a run of the tiny model on at most {@link MAX_SCALED_WORLD} ranks:
 * degrees kept when dp·tp·pp·cp fits, else the largest degree divided by its smallest prime
 * factor until it does (ties: dp, cp, pp, tp); micro-batches capped at
 * {@link MAX_SCALED_MICRO_BATCHES} (a multiple of pp when interleaved); virtual stages capped so
 * that pp · v ≤ {@link MAX_SCALED_LAYERS}; ZeRO off when dp·cp shrinks to 1. The model: pp·v layers, heads
 * tp (× cp for Ulysses, at least 2), width 16 per head (at least 32), context 16, and a global
 * batch of dp·m micro-batches of at least one sequence (8 sequences at least).
 * @throws Error when the result still breaks a rule of the trainer (a bug: the unit test walks every ranked plan).
 */
export function scaleDown(chosen: ParallelPlan, recompute: Recompute): ScaledRun {
  const changes: string[] = [];
  const d: Record<Degree, number> = { dp: chosen.dp, cp: chosen.cp, pp: chosen.pp, tp: chosen.tp };
  const world0 = planWorldSize(chosen);
  while (d.dp * d.cp * d.pp * d.tp > MAX_SCALED_WORLD) {
    const top = Math.max(...REDUCE_ORDER.map((k) => d[k]));
    const k = REDUCE_ORDER.find((x) => d[x] === top)!;
    d[k] /= smallestFactor(d[k]);
  }
  if (world0 > MAX_SCALED_WORLD) {
    const was = REDUCE_ORDER.filter((k) => d[k] !== chosen[k]).map((k) => `${k} ${chosen[k]} → ${d[k]}`);
    changes.push(`${world0} ranks exceed the ${MAX_SCALED_WORLD} rank workers of a tab: ${was.join(', ')}`);
  }
  let { schedule, virtualStages: v, microBatches: m, zero, sp } = chosen;
  if (schedule === 'interleaved' && d.pp === 1) {
    changes.push('interleaved schedule needs pp > 1: 1f1b');
    schedule = '1f1b';
    v = 1;
  }
  if (schedule === 'interleaved' && d.pp * v > MAX_SCALED_LAYERS) {
    const fit = Math.max(2, Math.floor(MAX_SCALED_LAYERS / d.pp));
    changes.push(`pp ${d.pp} × ${v} virtual stages exceed the tiny model's ${MAX_SCALED_LAYERS} layers: ${fit} virtual stages`);
    v = fit;
  }
  const capM = schedule === 'interleaved' ? Math.floor(MAX_SCALED_MICRO_BATCHES / d.pp) * d.pp : MAX_SCALED_MICRO_BATCHES;
  if (m > capM || (schedule === 'interleaved' && m % d.pp)) {
    const next = Math.min(m, capM) - (schedule === 'interleaved' ? Math.min(m, capM) % d.pp : 0);
    changes.push(`micro-batches ${m} → ${next} (at most ${MAX_SCALED_MICRO_BATCHES} in a tab${schedule === 'interleaved' ? `, a multiple of pp ${d.pp}` : ''})`);
    m = next;
  }
  if (sp && d.tp === 1) {
    changes.push('sequence parallelism needs tp > 1: off');
    sp = false;
  }
  if (zero > 0 && d.dp * d.cp === 1) {
    changes.push(`ZeRO-${zero} shards over dp·cp = 1: ZeRO 0`);
    zero = 0;
  }
  const plan: ParallelPlan = { ...chosen, ...d, schedule, virtualStages: v, microBatches: m, zero: zero as ParallelPlan['zero'], sp };
  const nHead = Math.max(2, d.tp * (d.cp > 1 && plan.cpKind === 'ulysses' ? d.cp : 1));
  const perStep = d.dp * m, batchSize = perStep * Math.max(1, Math.ceil(8 / perStep));
  const model: TinyModel = { nLayer: d.pp * v, nHead, nEmbd: Math.max(32, 16 * nHead), blockSize: 16, batchSize };
  const world = planWorldSize(plan);
  const cfg = parseConfig({ ...model, recompute, batchSize: batchSize / m, gradAccum: m, steps: 3, warmup: 0 });
  const problems = planProblems(plan, { ...model, vocabSize: VOCAB }, world, runFactsOf(cfg), MAX_RUN_WORLD);
  if (problems.length) throw new Error(`scaled-down plan is invalid: ${problems.join('; ')}`);
  return { plan, recompute, model, world, changes };
}

/** The Setup values that start a {@link ScaledRun}: the form's, and every parallel field (the rest at their defaults). */
export interface SetupValues {
  form: Record<string, string | number>;
  parallel: Record<string, string>;
}

/**
 * The Setup form and parallel fields for `run` over `steps` steps with the network `net` (a
 * preset name, or custom fields from `intra=…;inter=…;node=…`). `gradAccum` is the form
 * preset's (the form has no field for it): the batch is chosen so that batch × gradAccum splits
 * into dp · micro-batches. Low-communication sync and compression go back to their defaults.
 */
export function setupValues(run: ScaledRun, steps: number, net: string, gradAccum = 1): SetupValues {
  const { plan, model } = run, group = plan.dp * plan.microBatches;
  const batch = model.batchSize % gradAccum === 0 && (model.batchSize / gradAccum) * gradAccum % group === 0
    ? model.batchSize / gradAccum
    : group;
  const form = {
    arch: 'gpt', nLayer: model.nLayer, nHead: model.nHead, nEmbd: model.nEmbd, blockSize: model.blockSize,
    batchSize: batch, recompute: run.recompute, steps, evalInterval: steps,
  };
  const parallel: Record<string, string> = {};
  for (const f of planFields()) if (f.key !== 'net') parallel[f.key] = f.default ?? '';
  Object.assign(parallel, {
    world: String(run.world), dp: String(plan.dp), tp: String(plan.tp), pp: String(plan.pp), cp: String(plan.cp), ep: '1',
    zero: String(plan.zero), sp: String(plan.sp), microBatches: String(plan.microBatches), ppSchedule: plan.schedule,
    virtualStages: String(plan.virtualStages), cpKind: plan.cpKind,
  }, netFields(net));
  return { form, parallel };
}

/** The parallel Setup's network controls for `net`: a preset as is, else parseNetwork's links as the custom fields. @throws Error as parseNetwork. */
export function netFields(net: string): Record<string, string> {
  if (NET_PRESETS[net.trim()]) return { net: net.trim() };
  const s = parseNetwork(net), n = (x: number) => String(+x.toPrecision(6));
  return {
    net: 'custom', intraBw: n(s.intra.betaGBps), intraLat: n(s.intra.alphaUs), interBw: n(s.inter.betaGBps),
    interLat: n(s.inter.alphaUs), node: String(s.ranksPerNode),
  };
}
