/**
 * Memory per rank of a parallel plan (docs/design.md#memory-per-rank): parameters, gradients and optimizer
 * state under each ZeRO stage, in fp32 and in mixed precision. Activations are
 * activation_memory.ts's; communication is cost.ts's.
 *
 * Units: bytes.
 */
import { type ParallelPlan, planMesh, type PlanModel, rankParams, zeroWorkingElements } from '../parallel/plan/plan.ts';

/** Bytes per rank of parameters, gradients and optimizer state. */
export interface MemoryBytes {
  params: number;
  grads: number;
  optimizer: number;
  total: number;
}

const mem = (params: number, grads: number, optimizer: number): MemoryBytes => ({
  params,
  grads,
  optimizer,
  total: params + grads + optimizer,
});

function checkZero(psi: number, d: number, zero: number, what: string): void {
  if (!Number.isInteger(psi) || psi < 0 || !Number.isInteger(d) || d < 1 || ![0, 1, 2, 3].includes(zero)) {
    throw new Error(`${what}: need Ψ ≥ 0 and d ≥ 1 integers and zero in 0…3; got Ψ ${psi}, d ${d}, zero ${zero}`);
  }
}

/**
 * Memory per rank in this sandbox's pure-fp32 training (ZeRO, Rajbhandari et al., arXiv
 * 1910.02054, with fp32 everywhere): 4 bytes of parameter, 4 of gradient and 8 of AdamW
 * state (m, v) per parameter. Stage 1 shards the optimizer state, stage 2 also the
 * gradients, stage 3 also the parameters, over d ranks; a shard is ⌈Ψ/d⌉ elements (the flat
 * buffer padded to a multiple of d so reduce-scatter splits it evenly). Stages 2–3 add the
 * working buffers that hold `working` elements (plan.ts zeroWorkingElements: the resident
 * units plus one layer) of gathered gradients, and at stage 3 of gathered values (zero_units.ts).
 * @throws Error on a negative Ψ, d < 1 or a stage outside 0…3.
 */
export function zeroMemoryFp32(psi: number, d: number, zero: 0 | 1 | 2 | 3, working = 0): MemoryBytes {
  checkZero(psi, d, zero, 'zeroMemoryFp32');
  const shard = Math.ceil(psi / d);
  return mem(
    4 * (zero >= 3 ? shard + working : psi),
    4 * (zero >= 2 ? shard + working : psi),
    8 * (zero >= 1 ? shard : psi),
  );
}

/**
 * Predicted model-state bytes of `rank` under `plan` (fp32 AdamW, {@link zeroMemoryFp32}): its
 * dense parameters (plan.ts rankParams) sharded by the ZeRO stage over dp·cp, with ZeRO-2/3's
 * working buffers (plan.ts zeroWorkingElements), and its experts over the dp·cp/ep ranks that
 * hold the same ones. `paramElements` = dense + expert elements.
 */
export function rankMemory(
  plan: ParallelPlan,
  model: PlanModel,
  rank: number,
  bias = true,
): MemoryBytes & { paramElements: number } {
  const p = rankParams(plan, model, rank, bias), d = plan.dp * plan.cp, pp = planMesh(plan).coords(rank).pp;
  const at = { first: pp === 0, last: pp === plan.pp - 1 };
  const working = plan.zero >= 2 ? zeroWorkingElements(model, bias, plan.tp, at, plan.ep) : 0;
  const dense = zeroMemoryFp32(p.dense, d, plan.zero, working);
  const ex = zeroMemoryFp32(p.expert, d / plan.ep, plan.zero);
  return {
    ...mem(dense.params + ex.params, dense.grads + ex.grads, dense.optimizer + ex.optimizer),
    paramElements: p.dense + p.expert,
  };
}

/**
 * The mixed-precision formulas of docs/design.md#memory-per-rank (ZeRO paper §5): fp16 parameters 2Ψ, fp16
 * gradients 2Ψ, k bytes of fp32 optimizer state per parameter (k = 12: master weights, m, v):
 * no ZeRO 16Ψ; ZeRO-1 4Ψ + kΨ/d; ZeRO-2 2Ψ + (2+k)Ψ/d; ZeRO-3 (4+k)Ψ/d (unrounded).
 * @throws Error on a negative Ψ, d < 1 or a stage outside 0…3.
 */
export function zeroMemoryMixed(psi: number, d: number, zero: 0 | 1 | 2 | 3, k = 12): MemoryBytes {
  checkZero(psi, d, zero, 'zeroMemoryMixed');
  return mem(2 * psi / (zero >= 3 ? d : 1), 2 * psi / (zero >= 2 ? d : 1), k * psi / (zero >= 1 ? d : 1));
}
