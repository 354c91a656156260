/**
 * The predicted time of one optimizer step of a plan (docs/design.md#a-performance-model-that-chooses-the-plan):
 * compute from per-op FLOPs over the device's achieved rate for that op's shape (device_profile.ts), plus the
 * communication each dimension leaves exposed, plus the pipeline bubble, plus the optimizer.
 *
 * - Compute: per layer the four GEMMs of a Megatron block on a tensor-parallel rank (QKV, attention
 *   out, MLP up, MLP down), each backward as its two GEMMs (input and weight gradients) of the
 *   transposed shapes; the attention core (FlashAttention's rate, or two batched GEMMs for the
 *   naive kernel); the memory-bound ops (norms, residuals, GELU, the naive kernel's softmax) as
 *   bytes over the memory bandwidth. Recomputation adds the block's forward (full) or the
 *   attention core's (selective). The last stage also runs the LM head and cross-entropy.
 * - Communication (dim_traffic.ts's calls, α-β times of src/comm/cost.ts on the plan's links):
 *   tensor parallelism and Ulysses all-to-alls on the critical path; ring attention's K,V
 *   blocks overlap that layer's attention core; pipeline sends once per micro-batch boundary
 *   and model chunk; the dp gradient buckets overlap the last micro-batch's backward except the
 *   last bucket; ZeRO-1/2's parameter all-gather after the optimizer is exposed, and so are
 *   ZeRO-3's per-layer gathers (the engine fetches a layer when it reaches it, no prefetch);
 *   ZeRO-2/3's per-micro-batch reduce-scatters overlap that micro-batch's backward.
 * - Bubble: a micro-batch's stage time × (p − 1)/v (pipeline_sim.ts bubbleFraction's share).
 *
 * Units: seconds, bytes, FLOP/s.
 */
import { predictUs } from '../comm/cost.ts';
import type { NetworkModel } from '../comm/network.ts';
import type { PlanDim } from '../parallel/cost/cost.ts';
import { paddedVocab, type ParallelPlan, type PlanModel, planWorldSize } from '../parallel/plan/plan.ts';
import { bubbleFraction } from '../parallel/pipeline/pipeline_sim.ts';
import { attentionRate, type DeviceProfile, gemmSeconds, peakFlops } from './device_profile.ts';
import { approxElements, type DimCall, dimCalls, elementsByDim, rankOfCoords } from './dim_traffic.ts';
import { type StepMemory, stepMemory, type StepOptions } from './step_memory.ts';

/**
 * Kernel dispatches of one transformer block per micro-batch, counted from the block's forward (two layer norms,
 * QKV, attention, output projection, two residual adds, MLP up, GELU, MLP down: 11) and a backward of about twice
 * as many; the LM head and cross-entropy add `head`. Each costs the profile's `launchOverheadS` on top of its
 * work: what dominates small shapes on a CPU adapter, nothing on a large GPU run.
 */
export const DISPATCHES_PER_LAYER = { forward: 11, backward: 22, head: 6 };

/** Engine default gradient bucket (src/parallel/data/data_parallel.ts: 1 MiB). */
export const BUCKET_BYTES = 2 ** 20;

export interface StepPrediction {
  /** Seconds of one optimizer step. */
  step: number;
  /** Seconds of compute on the critical stage over the step (all micro-batches). */
  compute: number;
  /** Exposed communication seconds per dimension. */
  exposed: Record<PlanDim, number>;
  /** Idle pipeline seconds and their share of the pipelined part. */
  bubble: number;
  bubbleFraction: number;
  optimizer: number;
  /** Bytes the critical rank sends per step, by dimension. */
  bytes: Record<PlanDim, number>;
  memory: StepMemory;
  /** Model FLOPs per step (6N + 12·L·h·T per token, no recomputation) over step × world × peak. */
  mfu: number;
  /** Model FLOP/s per rank, TFLOP/s. */
  tflops: number;
}

/** Model FLOPs of one step: per token 6N + 12·L·h·T (Chowdhery et al., PaLM, arXiv 2204.02311 App. B). */
export function modelFlops(model: PlanModel, params: number): number {
  const { nLayer: L, nEmbd: h, blockSize: T, batchSize: B } = model;
  return B * T * (6 * params + 12 * L * h * T);
}

/** Seconds of one layer on one rank per micro-batch: forward, backward and recomputed forward. */
function layerSeconds(plan: ParallelPlan, model: PlanModel, o: StepOptions, dev: DeviceProfile) {
  const { tp: t, cp, sp } = plan, h = model.nEmbd, a = model.nHead, T = model.blockSize, hs = h / a;
  const b = model.batchSize / (plan.dp * plan.microBatches), s = T / cp, N = b * s, dt = o.dtype;
  const shapes: [number, number, number][] = [[N, (3 * h) / t, h], [N, h, h / t], [N, (4 * h) / t, h], [
    N,
    h,
    4 * h / t,
  ]];
  const g = (m: number, n: number, k: number) => gemmSeconds(dev, dt, m, n, k);
  const gemmF = shapes.reduce((x, [m, n, k]) => x + g(m, n, k), 0);
  const gemmB = shapes.reduce((x, [m, n, k]) => x + g(m, k, n) + g(k, n, m), 0);
  const heads = (b * a) / t, attnFlops = 4 * b * s * T * (h / t);
  const attnF = o.attention === 'flash' ? attnFlops / attentionRate(dev, dt, hs) : heads * (g(s, T, hs) + g(s, hs, T));
  const bytes = dt === 'f32' ? 4 : 2;
  const softmax = o.attention === 'naive' ? (4 * b * a * s * T) / t : 0;
  const ewF = ((N * 10 * h) / (sp ? t : 1) + (N * 8 * h) / t + softmax) * bytes / dev.memBandwidth;
  const softmaxF = softmax * bytes / dev.memBandwidth;
  const launch = dev.launchOverheadS ?? 0;
  const forward = gemmF + attnF + ewF + DISPATCHES_PER_LAYER.forward * launch;
  const backward = gemmB + 2 * attnF + 2 * ewF + DISPATCHES_PER_LAYER.backward * launch;
  const again = o.recompute === 'full' ? forward : o.recompute === 'selective' ? attnF + softmaxF : 0;
  return { forward, backward, again, attnF };
}

/** Seconds of the LM head and cross-entropy per micro-batch (last stage). */
function headSeconds(plan: ParallelPlan, model: PlanModel, o: StepOptions, dev: DeviceProfile): number {
  const b = model.batchSize / (plan.dp * plan.microBatches), N = b * (model.blockSize / plan.cp);
  const vt = paddedVocab(model.vocabSize, plan.tp) / plan.tp, h = model.nEmbd;
  const g = (m: number, n: number, k: number) => gemmSeconds(dev, o.dtype, m, n, k);
  const launch = DISPATCHES_PER_LAYER.head * (dev.launchOverheadS ?? 0);
  return g(N, vt, h) + g(N, h, vt) + g(h, vt, N) + (3 * 4 * N * vt) / dev.memBandwidth + launch; // fp32 logits: write, softmax, grad
}

/**
 * Seconds of compute of one micro-batch through all `model.nLayer / plan.pp` layers of a rank
 * (forward, backward, recomputation) plus the LM head: the step's compute without communication.
 */
export function microBatchSeconds(plan: ParallelPlan, model: PlanModel, o: StepOptions, dev: DeviceProfile): number {
  const ly = layerSeconds(plan, model, o, dev);
  return (model.nLayer / plan.pp) * (ly.forward + ly.backward + ly.again) + headSeconds(plan, model, o, dev);
}

/**
 * Seconds of one pipeline action of a rank for one micro-batch: the forward and the backward
 * (recomputation included) of its L/(pp·v) layers, the LM head's share on the last stage (a third
 * forward, two thirds backward). What the engine charges its simulated clock per action under a
 * modelled peak (action_prices.ts), so a measured step prices compute as this model does.
 */
export function actionSeconds(
  plan: ParallelPlan,
  model: PlanModel,
  o: StepOptions,
  dev: DeviceProfile,
  last: boolean,
): { forward: number; backward: number } {
  const ly = layerSeconds(plan, model, o, dev), L = model.nLayer / (plan.pp * plan.virtualStages);
  const head = last ? headSeconds(plan, model, o, dev) : 0;
  return { forward: L * ly.forward + head / 3, backward: L * (ly.backward + ly.again) + (2 * head) / 3 };
}

/**
 * Seconds of one call of `c` (its whole buffer in `bytes` per element) on the link its group spans, plus the
 * profile's host round trip: ranks that share no device memory read each tensor back to the host before the data
 * plane moves it (src/comm/tensor_comm.ts), a submit-and-wait that `--calibrate` measures (absent: 0).
 */
function callSeconds(c: DimCall, net: NetworkModel, bytes: number, dev: DeviceProfile): number {
  const link = c.span < net.spec.ranksPerNode && c.span >= 0 ? net.spec.intra : net.spec.inter;
  const size = c.n * bytes, host = dev.hostRoundTripS ?? 0;
  if (c.collective === 'send') return host + (link.alphaUs + size / (link.betaGBps * 1e3)) / 1e6;
  return host + predictUs(c.collective, c.collective === 'allToAll' ? 'direct' : 'ring', size, c.p, link) / 1e6;
}

/**
 * The predicted step of a valid `plan` (plan/rules.ts checkPlan) for a dense GPT `model` on `dev` and
 * `net`, critical rank: the first rank of the last pipeline stage (it holds the LM head).
 * `params` is the model's parameter count (for MFU). @throws as dimCalls for a MoE model.
 */
export function predictStep(
  plan: ParallelPlan,
  model: PlanModel,
  o: StepOptions,
  dev: DeviceProfile,
  net: NetworkModel,
  params: number,
): StepPrediction {
  const { pp: P, microBatches: m, virtualStages: v } = plan, world = planWorldSize(plan);
  const rank = rankOfCoords(plan, { dp: 0, pp: P - 1, cp: 0, tp: 0 });
  const calls = dimCalls(plan, model, rank, o.recompute), bytes = o.dtype === 'f32' ? 4 : 2;
  const sum = (dim: PlanDim, what?: RegExp) =>
    calls.filter((c) => c.dim === dim && (!what || what.test(c.what)))
      .reduce((x, c) => x + c.calls * callSeconds(c, net, bytes, dev), 0);
  const L = model.nLayer / P, ly = layerSeconds(plan, model, o, dev);
  const fwd = L * ly.forward, bwd = L * (ly.backward + ly.again), head = headSeconds(plan, model, o, dev);
  const stage = fwd + bwd + head;
  // Per micro-batch on the critical path: tensor-parallel and Ulysses collectives, pipeline sends.
  const tpMb = sum('tp') / m;
  const ring = calls.filter((c) => c.dim === 'cp' && c.collective === 'send');
  const ringMb = ring.reduce((x, c) => x + c.calls * callSeconds(c, net, bytes, dev), 0) / m;
  const ringAttn = L * ly.attnF * (o.recompute === 'none' ? 3 : 4); // forward, backward (2×), recomputed
  const cpMb = ring.length ? Math.max(0, ringMb - ringAttn) : sum('cp') / m;
  const sends = calls.filter((c) => c.dim === 'pp' && c.collective === 'send');
  const ppMb = P > 1 ? 2 * v * (sends.length ? callSeconds(sends[0], net, bytes, dev) : 0) : 0;
  const mb = stage + tpMb + cpMb + ppMb, bubble = (mb * (P - 1)) / v;
  // Data parallelism: the gradient sync (dp calls over the dp·cp group), overlapped as the module doc says.
  const time = (c: DimCall) => c.calls * callSeconds(c, net, bytes, dev);
  const dp = calls.filter((c) => c.dim === 'dp'), scalar = (c: DimCall) => /norm/.test(c.what);
  let dpExposed = dp.filter(scalar).reduce((x, c) => x + time(c), 0);
  const backwardMb = bwd + head;
  // The last bucket waits for the backward to end; the others hide behind it (as far as it lasts).
  const tail = (per: number, c: DimCall) => {
    const buckets = Math.max(1, Math.ceil((c.n * bytes) / BUCKET_BYTES));
    return per / buckets + Math.max(0, per * (1 - 1 / buckets) - backwardMb);
  };
  for (const c of dp.filter((c) => !scalar(c))) {
    const t = time(c), per = t / c.calls;
    // ZeRO-1/2 gather after the optimizer step; ZeRO-3 gathers each layer when the executor reaches
    // it (zero_sync.ts: on demand, no prefetch), so the step waits for those too.
    if (c.collective === 'allGather') dpExposed += t;
    else if (plan.zero === 3) dpExposed += c.calls * Math.max(0, per - backwardMb);
    else if (plan.zero === 2) dpExposed += (c.calls - 1) * Math.max(0, per - backwardMb) + tail(per, c);
    else dpExposed += tail(per, c);
  }
  const ppOther = sum('pp', /tied/);
  const shard = plan.zero >= 1 ? params / (plan.tp * P * plan.dp * plan.cp) : params / (plan.tp * P);
  const optimizer = (28 * shard) / dev.memBandwidth; // read grads, rewrite master weights, m, v; write params
  const pipelined = m * mb + bubble;
  const step = pipelined + dpExposed + ppOther + optimizer;
  const flops = modelFlops(model, params);
  const elements = elementsByDim(calls, approxElements);
  const byDim = (x: (d: PlanDim) => number) =>
    Object.fromEntries((['dp', 'tp', 'pp', 'cp', 'ep'] as const).map((d) => [d, x(d)])) as Record<PlanDim, number>;
  return {
    step,
    compute: m * stage,
    exposed: { dp: dpExposed, tp: m * tpMb, pp: m * ppMb + ppOther, cp: m * cpMb, ep: 0 },
    bubble,
    bubbleFraction: P > 1 ? bubbleFraction(P, m, v) : 0,
    optimizer,
    bytes: byDim((d) => elements[d] * bytes),
    memory: stepMemory(plan, model, o),
    mfu: flops / (step * world * peakFlops(dev, o.dtype)),
    tflops: flops / (step * world) / 1e12,
  };
}
