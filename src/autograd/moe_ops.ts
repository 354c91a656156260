/**
 * Differentiable mixture-of-experts ops on the tape and their vector-Jacobian products
 * (MOE_RULES, merged into RULES in rules.ts). The routing decisions themselves (top-k, slots)
 * are integer tensors computed on the GPU (kernels/moe.ts) and treated as constants, as in
 * Switch Transformer / GShard: gradients reach the router only through the combine weights
 * and the load-balancing loss.
 *
 * Token movement is two gathers: dispatch copies token rows into expert slots
 * (y[s] = x[slotSrc[s]/k]) and combine sums each token's slots back (y[n] = Σ_j g_nj·src[slot_nj]).
 * Each one's backward is the other one's gather over the inverse index, so nothing scatters.
 */
import type { Gpu } from '../gpu/context.ts';
import { Tensor } from '../gpu/tensor.ts';
import { matmul } from '../kernels/matmul.ts';
import { columnSum } from '../kernels/reduce.ts';
import {
  auxLossBackward,
  auxLossForward,
  groupColumnSum,
  routerGates,
  routerGatesBackward,
  type SlotPlan,
  softmaxRows,
  softmaxRowsBackward,
} from '../kernels/moe.ts';
import { gatherRows, gatherSumRows, rowDots } from '../kernels/moe_gather.ts';
import type { Tape } from './tape.ts';
import type { GradContext, RuleTable } from './records.ts';

/** What each MoE op saves for its backward (entries of OpRecords in tape.ts). */
export interface MoERecords {
  /** y (N, E) = softmax of the router logits x (N, E) */
  moeSoftmax: { x: Tensor; y: Tensor; n: number; e: number };
  /** gates (N, k) = probs[n, top_nj], renormalised over j when asked; top (N, k) i32 constant */
  moeGates: { probs: Tensor; top: Tensor; gates: Tensor; n: number; e: number; k: number; renormalise: boolean };
  /** y (S, C) = x[slotSrc[s] / k] (0 for empty slots); slot (N, k) is the inverse index */
  moeDispatch: { x: Tensor; y: Tensor; slot: Tensor; slotSrc: Tensor; n: number; k: number; c: number };
  /** y (N, C) = Σ_j gates[n, j] · src[slot[n, j]] over kept choices */
  moeCombine: { src: Tensor; gates: Tensor; slot: Tensor; slotSrc: Tensor; y: Tensor; n: number; k: number; c: number };
  /** y (E·R, Cout) = per expert block e: x_e (R, Cin) · ws[e]ᵀ + bs[e] */
  moeExpertLinear: {
    x: Tensor;
    ws: Tensor[];
    bs: (Tensor | null)[];
    y: Tensor;
    rows: number;
    cin: number;
    cout: number;
  };
  /** out (3) = prev + [aux, 0, aux], the load-balancing loss; terminal like crossEntropy */
  moeAuxLoss: {
    probs: Tensor;
    counts: Tensor;
    prev: Tensor;
    out: Tensor;
    plan: SlotPlan;
    alpha: number;
    gradScale: number;
  };
}

/** Rows [start, start + rows) of a row-major (·, cols) tensor as a view (start·cols·4 bytes must be aligned). */
export function rowBlock(t: Tensor, start: number, rows: number, cols: number): Tensor {
  return new Tensor(
    t.gpu,
    t.buffer,
    [rows, cols],
    t.dtype,
    t.offset + start * cols * 4,
    false,
    `${t.label}[${start}:]`,
  );
}

/** probs (N, E) = softmax(logits (N, E)), the Switch router's distribution. */
export function routerSoftmax(tape: Tape, logits: Tensor, n: number, e: number, label = 'router.probs'): Tensor {
  const y = tape.alloc([n, e], label);
  softmaxRows(tape.gpu, logits, y, n, e);
  tape.record({ op: 'moeSoftmax', x: logits, y, n, e }, [logits], [y]);
  return y;
}

/** gates (N, k) = combine weights of the chosen experts top (N, k) (see kernels/moe.ts routerGates). */
export function routerGatesOp(
  tape: Tape,
  probs: Tensor,
  top: Tensor,
  n: number,
  e: number,
  k: number,
  renormalise: boolean,
  label = 'router.gates',
): Tensor {
  const gates = tape.alloc([n, k], label);
  routerGates(tape.gpu, probs, top, gates, n, e, k, renormalise);
  tape.record({ op: 'moeGates', probs, top, gates, n, e, k, renormalise }, [probs], [gates]);
  return gates;
}

/**
 * xe (S, C) = the token rows of x (N, C) in their expert slots: slotSrc (S) i32 holds n·k + j or
 * −1, slot (N, k) i32 its inverse (kernels/moe.ts assignSlots).
 */
export function dispatchRows(
  tape: Tape,
  x: Tensor,
  slot: Tensor,
  slotSrc: Tensor,
  n: number,
  k: number,
  c: number,
  label = 'moe.dispatch',
): Tensor {
  const y = tape.alloc([slotSrc.size, c], label);
  gatherRows(tape.gpu, x, slotSrc, y, c, k);
  tape.record({ op: 'moeDispatch', x, y, slot, slotSrc, n, k, c }, [x], [y]);
  return y;
}

/** y (N, C) = Σ_j gates[n, j] · src[slot[n, j]], src (S, C) the expert outputs; dropped choices add 0. */
export function combineRows(
  tape: Tape,
  src: Tensor,
  gates: Tensor,
  slot: Tensor,
  slotSrc: Tensor,
  n: number,
  k: number,
  c: number,
  label = 'moe.combine',
): Tensor {
  const y = tape.alloc([n, c], label);
  gatherSumRows(tape.gpu, src, slot, y, n, k, c, { weights: gates });
  tape.record({ op: 'moeCombine', src, gates, slot, slotSrc, y, n, k, c }, [src, gates], [y]);
  return y;
}

/**
 * y (E·R, Cout) = x_e · ws[e]ᵀ + bs[e] for each expert block of R rows of x (E·R, Cin), ws[e]
 * (Cout, Cin) as torch.nn.Linear. R·Cin and R·Cout must be multiples of the storage alignment
 * (kernels/moe.ts slotPlan pads R so).
 * @throws Error when x is not (E·R, Cin) for E = ws.length, a weight has the wrong shape, or
 *   the blocks are not aligned views.
 */
export function expertLinear(
  tape: Tape,
  x: Tensor,
  ws: Tensor[],
  bs: (Tensor | null)[],
  rows: number,
  label = 'moe.expert',
): Tensor {
  const [cout, cin] = ws[0].shape;
  const e = ws.length;
  if (x.size !== e * rows * cin) throw new Error(`${label}: x [${x.shape}] is not (E·R, Cin) = (${e}·${rows}, ${cin})`);
  ws.forEach((w, i) => {
    if (w.shape[0] !== cout || w.shape[1] !== cin) {
      throw new Error(`${label}: expert ${i} weight [${w.shape}] is not [${cout}, ${cin}]`);
    }
    if (bs[i] && bs[i]!.size !== cout) throw new Error(`${label}: expert ${i} bias [${bs[i]!.shape}] is not [${cout}]`);
  });
  const align = Math.max(64, tape.gpu.device.limits.minStorageBufferOffsetAlignment / 4);
  if ((rows * cin) % align || (rows * cout) % align) {
    throw new Error(
      `${label}: expert blocks of ${rows} rows are not storage-aligned views (rows·Cin and rows·Cout must be multiples of ${align}); pad rows as slotPlan does`,
    );
  }
  const y = tape.alloc([e * rows, cout], label);
  for (let i = 0; i < e; i++) {
    const yi = rowBlock(y, i * rows, rows, cout);
    matmul(tape.gpu, rowBlock(x, i * rows, rows, cin), ws[i], yi, rows, cout, cin, { transB: true, bias: bs[i] });
  }
  tape.record({ op: 'moeExpertLinear', x, ws, bs, y, rows, cin, cout }, [x, ...ws, ...bs], [y]);
  return y;
}

/**
 * The load-balancing loss added to a loss `prev` ((2) cross-entropy or (3) a previous
 * auxLoss): out (3) = [prev₀ + aux, prev₁, prev₂ + aux], aux = (α·E/G)·Σ_g Σ_e f_ge·P_ge, with
 * P from probs (N, E) and f from counts (assignSlots' first-choice loads, constants). Like the
 * cross-entropy it is terminal: its rule adds gradScale·∂aux/∂probs without an incoming gradient.
 */
export function auxLoss(
  tape: Tape,
  probs: Tensor,
  counts: Tensor,
  prev: Tensor,
  plan: SlotPlan,
  alpha: number,
  gradScale: number,
): Tensor {
  const colsum = tape.alloc([plan.groups * plan.e], 'aux.colsum');
  tape.gpu.clear(colsum);
  groupColumnSum(tape.gpu, probs, colsum, plan);
  const out = tape.alloc([3], 'loss+aux');
  auxLossForward(tape.gpu, colsum, counts, prev, out, plan, alpha);
  tape.record({ op: 'moeAuxLoss', probs, counts, prev, out, plan, alpha, gradScale }, [probs], [out]);
  return out;
}

function expertLinearBackward(gpu: Gpu, g: GradContext, r: MoERecords['moeExpertLinear']): void {
  const dy = g.grad(r.y);
  if (!dy) return;
  const { rows, cin, cout } = r;
  const dx = g.acc(r.x);
  r.ws.forEach((w, i) => {
    const dyi = rowBlock(dy, i * rows, rows, cout);
    if (dx) matmul(gpu, dyi, w, rowBlock(dx, i * rows, rows, cin), rows, cin, cout, { beta: 1 });
    const dw = g.acc(w);
    if (dw) matmul(gpu, dyi, rowBlock(r.x, i * rows, rows, cin), dw, cout, cin, rows, { transA: true, beta: 1 });
    const b = r.bs[i];
    const db = b && g.acc(b);
    if (db) columnSum(gpu, dyi, db, rows, cout);
  });
}

type MoEOp = keyof MoERecords;

/** The rules of the MoE ops; every backward accumulates. */
export const MOE_RULES: Pick<RuleTable, MoEOp> = {
  moeSoftmax(g, { x, y, n, e }) {
    const dy = g.grad(y), dx = g.acc(x);
    if (dy && dx) softmaxRowsBackward(g.gpu, y, dy, dx, n, e);
  },
  moeGates(g, { probs, top, gates, n, e, k, renormalise }) {
    const dg = g.grad(gates), dp = g.acc(probs);
    if (dg && dp) routerGatesBackward(g.gpu, probs, top, dg, dp, n, e, k, renormalise);
  },
  moeDispatch(g, { x, y, slot, n, k, c }) {
    const dy = g.grad(y), dx = g.acc(x);
    if (dy && dx) gatherSumRows(g.gpu, dy, slot, dx, n, k, c, { accumulate: true });
  },
  moeCombine(g, { src, gates, slot, slotSrc, y, n, k, c }) {
    const dy = g.grad(y);
    if (!dy) return;
    const dsrc = g.acc(src);
    if (dsrc) gatherRows(g.gpu, dy, slotSrc, dsrc, c, k, { weights: gates, accumulate: true });
    const dg = g.acc(gates);
    if (dg) rowDots(g.gpu, dy, src, slot, dg, n, k, c, true);
  },
  moeExpertLinear(g, r) {
    expertLinearBackward(g.gpu, g, r);
  },
  moeAuxLoss(g, { probs, counts, plan, alpha, gradScale }) {
    const dp = g.acc(probs);
    if (dp && alpha !== 0) auxLossBackward(g.gpu, counts, dp, plan, alpha, gradScale);
  },
};
