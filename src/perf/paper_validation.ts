/**
 * The step model against published paper-scale runs (docs/design.md#a-performance-model-that-chooses-the-plan):
 * Megatron-LM's Table 1 (Narayanan et al., arXiv 2104.04473: GPT models on A100-80GB over NVLink and InfiniBand, seq
 * 2048, vocab 51200, achieved TFLOP/s per GPU counted as 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)), i.e. with full
 * recomputation) and the 530B run of Korthikanti et al. (arXiv 2205.05198, abstract: 2240 A100s, model FLOPs
 * utilisation 54.2% with sequence parallelism and selective recomputation, 42.1% with full recomputation; MFU counts
 * 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h))).
 *
 * Assumptions where the sources are silent here (the same for every row, no per-row tuning):
 * micro-batch size 1, the non-interleaved 1F1B schedule, Megatron's fused (non-flash) softmax
 * attention, bf16, the `nvlink-ib` network, the `a100-80g` profile; for the 530B runs t 8, p 35
 * and a global batch of 2240 sequences (one per GPU, 280 micro-batches per data-parallel rank).
 */
import { NetworkModel } from '../comm/network.ts';
import { makePlan, type PlanModel, planProblems, rankParams } from '../parallel/plan/plan.ts';
import type { Recompute } from '../models/recompute.ts';
import { DEVICE_PROFILES } from './device_profile.ts';
import { MODEL_PRESETS } from './model_presets.ts';
import { predictStep } from './step_time.ts';

/** One published configuration and its reported per-GPU figure. */
export interface PaperRow {
  name: string;
  source: string;
  model: PlanModel;
  tp: number;
  pp: number;
  gpus: number;
  recompute: Recompute;
  sp: boolean;
  /** Reported TFLOP/s per GPU, counted as `count` says. */
  published: number;
  /** 'hardware': Megatron's 96·… count (recomputation included); 'model': 72·… (MFU × peak). */
  count: 'hardware' | 'model';
}

const TABLE1: [string, number, number, number, number][] = [
  ['megatron-1.7b', 1, 1, 32, 137],
  ['megatron-3.6b', 2, 1, 64, 138],
  ['megatron-7.5b', 4, 1, 128, 142],
  ['megatron-18b', 8, 1, 256, 135],
  ['megatron-39b', 8, 2, 512, 138],
  ['megatron-76b', 8, 4, 1024, 140],
  ['megatron-146b', 8, 8, 1536, 148],
  ['megatron-310b', 8, 16, 1920, 155],
  ['megatron-530b', 8, 35, 2520, 163],
  ['megatron-1t', 8, 64, 3072, 163],
];

const A100_BF16 = 312;
const K530 = { ...MODEL_PRESETS['megatron-530b'], batchSize: 2240 };

/** Every row of the validation table, Table 1 first. */
export const PAPER_ROWS: PaperRow[] = [
  ...TABLE1.map(([name, tp, pp, gpus, published]): PaperRow => ({
    name,
    source: 'Narayanan et al. 2021, Table 1',
    model: MODEL_PRESETS[name],
    tp,
    pp,
    gpus,
    recompute: 'full',
    sp: false,
    published,
    count: 'hardware',
  })),
  {
    name: '530B sp + selective',
    source: 'Korthikanti et al. 2022, abstract (MFU 54.2%)',
    model: K530,
    tp: 8,
    pp: 35,
    gpus: 2240,
    recompute: 'selective',
    sp: true,
    published: 0.542 * A100_BF16,
    count: 'model',
  },
  {
    name: '530B full recompute',
    source: 'Korthikanti et al. 2022, abstract (MFU 42.1%)',
    model: K530,
    tp: 8,
    pp: 35,
    gpus: 2240,
    recompute: 'full',
    sp: false,
    published: 0.421 * A100_BF16,
    count: 'model',
  },
];

/** FLOPs per step as the row's paper counts them (see the module doc). */
export function paperFlops(m: PlanModel, count: PaperRow['count']): number {
  const { batchSize: B, blockSize: s, nLayer: l, nEmbd: h, vocabSize: V } = m;
  return count === 'hardware'
    ? 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
    : 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h));
}

/** A row with the model's prediction: TFLOP/s per GPU under the paper's count, and the error. */
export interface PaperPrediction extends PaperRow {
  predicted: number;
  /** predicted / published − 1. */
  error: number;
  stepSeconds: number;
  memoryGiB: number;
}

/**
 * Predicts one row: micro-batch 1, so dp = gpus/(t·p) and m = batch/dp micro-batches.
 * @throws Error when the row's plan breaks a rule of the plan's table (plan/rules.ts; a mistyped row).
 */
export function predictPaperRow(row: PaperRow): PaperPrediction {
  const dp = row.gpus / (row.tp * row.pp);
  const plan = makePlan({ dp, tp: row.tp, pp: row.pp, sp: row.sp, microBatches: row.model.batchSize / dp });
  const problems = planProblems(plan, row.model, row.gpus);
  if (problems.length) throw new Error(`paper row ${row.name}: ${problems.join('; ')}`);
  const params = rankParams(makePlan(), row.model, 0).dense;
  const r = predictStep(
    plan,
    row.model,
    { dtype: 'bf16', recompute: row.recompute, attention: 'naive' },
    DEVICE_PROFILES['a100-80g'],
    NetworkModel.parse('nvlink-ib'),
    params,
  );
  const predicted = paperFlops(row.model, row.count) / (r.step * row.gpus) / 1e12;
  return {
    ...row,
    predicted,
    error: predicted / row.published - 1,
    stepSeconds: r.step,
    memoryGiB: r.memory.total / 2 ** 30,
  };
}

/** Within this relative error a row counts as predicted (the acceptance bound). */
export const ACCEPT_ERROR = 0.25;

/** The validation table as text: every row with its error, misses marked. */
export function paperTable(rows: PaperPrediction[] = PAPER_ROWS.map(predictPaperRow)): string {
  const head = '| configuration | t | p | GPUs | batch | published TFLOP/s/GPU | predicted | error | step s |';
  const lines = rows.map((r) =>
    `| ${r.name} | ${r.tp} | ${r.pp} | ${r.gpus} | ${r.model.batchSize} | ${r.published.toFixed(1)} | ${
      r.predicted.toFixed(1)
    } | ${(r.error * 100).toFixed(1)}%${Math.abs(r.error) > ACCEPT_ERROR ? ' (miss)' : ''} | ${
      r.stepSeconds.toFixed(2)
    } |`
  );
  return [head, '|---|---|---|---|---|---|---|---|---|', ...lines].join('\n');
}
