/**
 * Mixture-of-experts routing (shaders/moe.wgsl): the router softmax, top-k choice, combine
 * weights, capacity-limited slot assignment, and the load-balancing loss of Switch Transformer
 * (Fedus et al., arXiv 2101.03961, eq. 4) computed per token group as in GShard (Lepikhin et
 * al., arXiv 2006.16668). The row gathers that move tokens into expert slots and back along
 * the routing's indices are in moe_gather.ts.
 *
 * Routing runs on the GPU so a forward pass needs no read-back: `assign` gives token n's j-th
 * choice the next free position of its expert in token order (the cumsum positions of
 * Switch/GShard), first for every token's first choice, then for the second choices, and
 * drops it (slot −1) once the expert's capacity is full. Slot buffers are (E, R, C): expert e's
 * rows start at e·R, group g's at e·R + g·cap, and R ≥ groups·cap is padded so each expert's
 * block is a 256-byte-aligned view for the per-expert matmuls.
 *
 * Backward entry points ACCUMULATE (+=).
 */
import type { Gpu } from '../gpu/context.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { need, positive, PREV_AUX, RENORM, run, TOKENS_PER_DISPATCH } from './moe_shader.ts';

/**
 * Where tokens go: N tokens in `groups` equal contiguous groups (GShard's local dispatch
 * groups; one per expert-parallel rank), E experts, k choices, `capacity` slots per expert and
 * group, `rows` ≥ groups·capacity rows per expert block.
 */
export interface SlotPlan {
  n: number;
  e: number;
  k: number;
  groups: number;
  capacity: number;
  rows: number;
}

/**
 * Expert capacity ⌈capacityFactor·tokens·k/E⌉ per group (Switch §2.2 / GShard; cost.ts uses the same).
 * @throws Error when the factor is not positive or the counts are not positive integers.
 */
export function expertCapacity(tokens: number, e: number, k: number, capacityFactor: number): number {
  positive('expertCapacity', { tokens, e, k });
  if (!(capacityFactor > 0)) throw new Error(`expertCapacity: capacityFactor must be > 0, got ${capacityFactor}`);
  return Math.ceil((capacityFactor * tokens * k) / e);
}

/**
 * The plan for n tokens: capacity per group and block rows padded so that rows·c is a
 * multiple of `alignElems` (every expert block a storage-offset-aligned view for widths c and 4c).
 * @throws Error when groups does not divide n, or k is not in 1 … E.
 */
export function slotPlan(
  n: number,
  e: number,
  k: number,
  groups: number,
  capacityFactor: number,
  c: number,
  alignElems = 64,
): SlotPlan {
  positive('slotPlan', { n, e, k, groups, c });
  if (n % groups) throw new Error(`slotPlan: ${groups} token groups must divide the ${n} tokens`);
  if (k > e) throw new Error(`slotPlan: topK ${k} must be at most the ${e} experts`);
  const capacity = expertCapacity(n / groups, e, k, capacityFactor);
  let rows = groups * capacity;
  while ((rows * c) % alignElems) rows++;
  return { n, e, k, groups, capacity, rows };
}

/** y (N, E) = softmax of each row of x (N, E). @throws Error on a size or dtype mismatch. */
export function softmaxRows(gpu: Gpu, x: Tensor, y: Tensor, n: number, e: number): void {
  positive('softmaxRows', { n, e });
  need('softmaxRows', 'x', x, n * e, 'f32', '(N, E)');
  need('softmaxRows', 'y', y, n * e, 'f32', '(N, E)');
  run(gpu, 'softmax_fwd', { fa: x, fout: y }, { n, c: e }, n);
}

/** dx (N, E) += y ∘ (dy − ⟨y, dy⟩_row), y the softmax output. @throws Error on a size mismatch. */
export function softmaxRowsBackward(gpu: Gpu, y: Tensor, dy: Tensor, dx: Tensor, n: number, e: number): void {
  positive('softmaxRowsBackward', { n, e });
  for (const [name, t] of [['y', y], ['dy', dy], ['dx', dx]] as const) {
    need('softmaxRowsBackward', name, t, n * e, 'f32', '(N, E)');
  }
  run(gpu, 'softmax_bwd', { fa: y, fb: dy, fout: dx }, { n, c: e }, n);
}

/** top (N, k) i32 = the k most probable experts of each row of probs (N, E), best first, ties to the lower index. */
export function topKExperts(gpu: Gpu, probs: Tensor, top: Tensor, n: number, e: number, k: number): void {
  positive('topKExperts', { n, e, k });
  if (k > e) throw new Error(`topKExperts: k ${k} must be at most E ${e}`);
  need('topKExperts', 'probs', probs, n * e, 'f32', '(N, E)');
  need('topKExperts', 'top', top, n * k, 'i32', '(N, k)');
  run(gpu, 'topk', { fa: probs, iout: top }, { n, c: e, k }, n);
}

/**
 * gates (N, k) = probs[n, top[n, j]], divided by their sum over j when `renormalise`
 * (Mixtral / GShard top-2) — Switch's top-1 keeps the raw probability.
 */
export function routerGates(
  gpu: Gpu,
  probs: Tensor,
  top: Tensor,
  gates: Tensor,
  n: number,
  e: number,
  k: number,
  renormalise: boolean,
): void {
  need('routerGates', 'probs', probs, n * e, 'f32', '(N, E)');
  need('routerGates', 'top', top, n * k, 'i32', '(N, k)');
  need('routerGates', 'gates', gates, n * k, 'f32', '(N, k)');
  run(gpu, 'gates_fwd', { fa: probs, ia: top, fout: gates }, { n, c: e, k, flags: renormalise ? RENORM : 0 }, n);
}

/** dprobs (N, E) += the VJP of {@link routerGates} for dgates (N, k). */
export function routerGatesBackward(
  gpu: Gpu,
  probs: Tensor,
  top: Tensor,
  dgates: Tensor,
  dprobs: Tensor,
  n: number,
  e: number,
  k: number,
  renormalise: boolean,
): void {
  need('routerGatesBackward', 'probs', probs, n * e, 'f32', '(N, E)');
  need('routerGatesBackward', 'dprobs', dprobs, n * e, 'f32', '(N, E)');
  need('routerGatesBackward', 'top', top, n * k, 'i32', '(N, k)');
  need('routerGatesBackward', 'dgates', dgates, n * k, 'f32', '(N, k)');
  run(gpu, 'gates_bwd', { fa: probs, fb: dgates, ia: top, fout: dprobs }, {
    n,
    c: e,
    k,
    flags: renormalise ? RENORM : 0,
  }, n);
}

/**
 * Capacity-limited slots from top (N, k): slot (N, k) i32 = the row of token n's j-th choice
 * in the (E·rows) slot buffer, −1 when dropped; slotSrc (E·rows) i32 = n·k + j of the choice
 * in each slot, −1 when empty; counts (2·G·E) i32 = [fill, top-1 load] per (group, expert),
 * whose load part is Switch's f_e·(N/G). First choices are placed before second choices.
 * @throws Error on a size or dtype mismatch.
 */
export function assignSlots(
  gpu: Gpu,
  top: Tensor,
  slot: Tensor,
  slotSrc: Tensor,
  counts: Tensor,
  plan: SlotPlan,
): void {
  const { n, e, k, groups, capacity, rows } = plan;
  need('assignSlots', 'top', top, n * k, 'i32', '(N, k)');
  need('assignSlots', 'slot', slot, n * k, 'i32', '(N, k)');
  need('assignSlots', 'slotSrc', slotSrc, e * rows, 'i32', '(E·rows)');
  need('assignSlots', 'counts', counts, 2 * groups * e, 'i32', '(2·G·E)');
  gpu.clear(counts);
  run(gpu, 'fill_i32', { iout: slotSrc }, { n: e * rows }, e * rows);
  for (let j = 0; j < k; j++) {
    for (let n0 = 0; n0 < n; n0 += TOKENS_PER_DISPATCH) {
      const n1 = Math.min(n, n0 + TOKENS_PER_DISPATCH);
      run(gpu, 'assign', { ia: top, iout: slot, iout2: slotSrc, icnt: counts }, {
        n,
        e,
        k,
        j,
        n0,
        n1,
        gs: n / groups,
        cap: capacity,
        rows,
      }, groups * e);
    }
  }
}

/** out (G·E) += Σ over each group's tokens of probs (N, E): N/G times Switch's P_e. */
export function groupColumnSum(gpu: Gpu, probs: Tensor, out: Tensor, plan: SlotPlan): void {
  const { n, e, groups } = plan;
  need('groupColumnSum', 'probs', probs, n * e, 'f32', '(N, E)');
  need('groupColumnSum', 'out', out, groups * e, 'f32', '(G·E)');
  for (let n0 = 0; n0 < n; n0 += TOKENS_PER_DISPATCH) {
    run(gpu, 'group_colsum', { fa: probs, fout: out }, {
      n,
      e,
      n0,
      n1: Math.min(n, n0 + TOKENS_PER_DISPATCH),
      gs: n / groups,
    }, groups * e);
  }
}

/**
 * out (3) = [prev[0] + aux, prev[1], prev[2] + aux] with aux = (α·E/G)·Σ_g Σ_e f_ge·P_ge
 * (Switch eq. 4 averaged over groups), f from counts' load part, P from colsum (G·E);
 * prev (2) is a cross-entropy [mean, count] or (3) a previous aux op's output.
 */
export function auxLossForward(
  gpu: Gpu,
  colsum: Tensor,
  counts: Tensor,
  prev: Tensor,
  out: Tensor,
  plan: SlotPlan,
  alpha: number,
): void {
  const { n, e, groups } = plan;
  need('auxLossForward', 'colsum', colsum, groups * e, 'f32', '(G·E)');
  need('auxLossForward', 'counts', counts, 2 * groups * e, 'i32', '(2·G·E)');
  need('auxLossForward', 'out', out, 3, 'f32', '(3)');
  if (prev.size !== 2 && prev.size !== 3) {
    throw new Error(`auxLossForward: prev must be a loss (2) or (3), got [${prev.shape}]`);
  }
  const gs = n / groups;
  run(gpu, 'aux_fwd', { fa: colsum, fb: prev, ia: counts, fout: out }, {
    n,
    e,
    gs,
    flags: prev.size === 3 ? PREV_AUX : 0,
    alpha: (alpha * e) / (groups * gs * gs),
  }, 1);
}

/** dprobs (N, E) += scale·(α·E/G)·f_ge/(N/G): the gradient of {@link auxLossForward} through P. */
export function auxLossBackward(
  gpu: Gpu,
  counts: Tensor,
  dprobs: Tensor,
  plan: SlotPlan,
  alpha: number,
  scale: number,
): void {
  const { n, e, groups } = plan;
  need('auxLossBackward', 'counts', counts, 2 * groups * e, 'i32', '(2·G·E)');
  need('auxLossBackward', 'dprobs', dprobs, n * e, 'f32', '(N, E)');
  const gs = n / groups;
  run(
    gpu,
    'aux_bwd',
    { ia: counts, fout: dprobs },
    { n, e, gs, alpha: (scale * alpha * e) / (groups * gs * gs) },
    n * e,
  );
}
