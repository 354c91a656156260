/**
 * The data-parallel gradient reduction under the plan's dp compression
 * (docs/design.md#compressed-collectives-and-the-per-dimension-policy): the plain allReduce, a compressed one
 * (comm/compressed.ts; error feedback keyed by the gradient's name, so the residual follows the same vector step to
 * step) or PowerSGD over the parameters' matrices (comm/powersgd_allreduce.ts). Kept apart from grad_sync.ts so the
 * sync reads the same with or without compression.
 */
import type { Gpu } from '../../gpu/context.ts';
import type { Tensor } from '../../gpu/tensor.ts';
import type { Communicator } from '../../comm/communicator.ts';
import type { GradMatrix, Scheme } from '../../comm/compression.ts';
import { CompressedComm } from '../../comm/compressed.ts';
import { type GradLayout, PowerSgdAllReduce } from '../../comm/powersgd_allreduce.ts';
import type { Param } from '../../nn/params.ts';
import type { TrainConfig } from '../../train/config.ts';
import { paramSpecsOf, pipelineBlocks } from '../../models/registry.ts';
import { expertOf } from '../../models/moe_specs.ts';
import { type ParallelPlan, planMesh } from '../plan/plan.ts';
import { stagePlacement } from '../pipeline/stages.ts';
import type { RankGradMatrices } from '../cost/compressed_rows.ts';
import { tpVocabConfig } from '../../models/vocab_pad.ts';

/** A reduction over a group of a packed gradient (the parameters back to back, no gaps), and its state. */
export interface GradReduce {
  reduce(g: Float32Array): Promise<Float32Array>;
  /** Tensors the reduction carries from step to step (residuals, PowerSGD's Q): a checkpoint's. */
  state(): Record<string, Tensor>;
}

/**
 * How `comm` reduces (`op`) the packed gradient of `ps` under `scheme` (absent or none: the
 * plain allReduce, bit for bit what runs without compression).
 * @param name error feedback's key for this gradient.
 * @throws Error from PowerSgdAllReduce or the compressor (e.g. fp16 without shader-f16).
 */
export function gradReduce(
  gpu: Gpu,
  comm: Communicator,
  ps: readonly Param[],
  scheme: Scheme | undefined,
  op: 'sum' | 'avg',
  name: string,
): GradReduce {
  if (scheme?.kind === 'powersgd') {
    const ar = new PowerSgdAllReduce(comm, gpu, gradLayout(ps), scheme.rank), p = comm.size;
    return {
      // PowerSGD averages; a sum is the average times the group size.
      reduce: async (g) => op === 'avg' ? await ar.allReduce(g) : (await ar.allReduce(g)).map((v) => v * p),
      state: () => ar.state(),
    };
  }
  if (scheme && scheme.kind !== 'none') {
    const cc = new CompressedComm(comm, gpu, scheme);
    cc.prepareAllReduce(name, gradLayout(ps).n);
    return { reduce: (g) => cc.allReduce(g, { op, name }), state: () => cc.state() };
  }
  return { reduce: (g) => comm.allReduce(g, { op }), state: () => ({}) };
}

/** The matrices of parameters `ps` packed back to back (a weight (rows, cols) is one; vectors are not). */
export function gradLayout(ps: readonly Param[]): GradLayout {
  let offset = 0;
  const matrices = [];
  for (const p of ps) {
    if (p.shape.length === 2) matrices.push({ name: p.name, offset, rows: p.shape[0], cols: p.shape[1] });
    offset += p.size;
  }
  return { n: offset, matrices };
}

/**
 * The gradient matrices rank `rank` of `plan` holds, from the host-side declarations and its
 * stage placement (what ModelStages builds, without a device): every 2-D parameter, dense ones
 * first. Under ep > 1 the experts are sharded by the MoE model itself, so `expert` is left out
 * (cost.ts then marks a PowerSGD expert row inexact).
 */
export function rankGradMatrices(
  cfg: TrainConfig,
  vocabSize: number,
  plan: ParallelPlan,
  rank: number,
): RankGradMatrices {
  const me = planMesh(plan).coords(rank), v = plan.virtualStages;
  const whole = plan.pp === 1 && plan.tp === 1;
  const place = whole
    ? null
    : stagePlacement(cfg.arch, pipelineBlocks(cfg), { ppRank: me.pp, pp: plan.pp, v }, plan.tp, me.tp);
  const dense: GradMatrix[] = [];
  let offset = 0;
  // vocabSize may be the tokenizer's or already padded: padding a padded V' leaves it as is.
  for (const s of paramSpecsOf(tpVocabConfig(cfg, plan.tp), vocabSize)) {
    const shape = place ? place(s)?.shape : s.shape;
    if (!shape || (plan.ep > 1 && expertOf(s.name))) continue;
    if (shape.length === 2) dense.push({ name: s.name, offset, rows: shape[0], cols: shape[1] });
    offset += shape.reduce((a, b) => a * b, 1);
  }
  return { dense };
}
