/**
 * Zero-bubble pipeline schedules (Qi et al., "Zero Bubble Pipeline Parallelism", arXiv 2401.10241;
 * docs/design.md#zero-bubble-zb-h1): the backward of each (micro, stage) split into B (the input's
 * gradient, sent upstream at once: the critical path) and W (the parameters' gradients, which
 * nothing downstream waits for), W placed where 1F1B idles. Lists in pipeline_schedule.ts's form,
 * with `weight` actions for W.
 */
import { type Compute, hoistReceives, type PipelineSchedule, withComm } from './pipeline_schedule.ts';

/**
 * ZB-H1 for p ranks and m micro-batches: 1F1B's order of F and B (min(p−r−1, m) warm-up forwards
 * on rank r, then F/B pairs, then the cooldown's B), each B followed by the W of the oldest
 * micro-batch once more than r W passes wait — rank r defers its W by r micro-batches, and the
 * deferred ones run at the end, where 1F1B's cooldown idles. Rank r then holds at most
 * (p−r−1) + 1 + r = p micro-batches awaiting W: 1F1B's peak (its first rank's), on every rank.
 * Bubble (p−1)(T_F + T_B − T_W) per rank ({@link zbH1BubbleMs}), B alone on the critical path.
 * @throws Error when p or m is not a positive integer, or m < p (rule `zb-h1-micro-batches`).
 */
export function zbH1(p: number, m: number): PipelineSchedule {
  if (![p, m].every((x) => Number.isInteger(x) && x >= 1)) {
    throw new Error(`ZB-H1: p ${p}, m ${m} must be positive integers`);
  }
  if (m < p) throw new Error(`ZB-H1: micro-batches ${m} must be at least pp ${p} (rule zb-h1-micro-batches)`);
  const lists = [...Array(p).keys()].map((r) => {
    const warm = Math.min(p - r - 1, m), list: Compute[] = [];
    let w = 0;
    const F = (micro: number) => list.push({ kind: 'forward', micro, stage: r });
    const B = (micro: number) => {
      list.push({ kind: 'backward', micro, stage: r });
      if (micro + 1 - w > r) list.push({ kind: 'weight', micro: w++, stage: r });
    };
    for (let j = 0; j < warm; j++) F(j);
    for (let j = 0; j < m - warm; j++) F(warm + j), B(j);
    for (let j = m - warm; j < m; j++) B(j);
    while (w < m) list.push({ kind: 'weight', micro: w++, stage: r });
    return list;
  });
  return hoistReceives(withComm('zb-h1', p, m, 1, lists));
}

/**
 * ZB-H1's bubble on each rank, in ms, from the paper's formula: (p−1)(T_F + T_B − T_W), against
 * 1F1B's (p−1)(T_F + T_B + T_W). With equal costs, a third of 1F1B's.
 * @throws Error when p is not a positive integer or a cost is negative.
 */
export function zbH1BubbleMs(p: number, fMs: number, bMs: number, wMs: number): number {
  if (!Number.isInteger(p) || p < 1) throw new Error(`zbH1BubbleMs: p ${p} must be a positive integer`);
  if (![fMs, bMs, wMs].every((x) => Number.isFinite(x) && x >= 0)) {
    throw new Error(`zbH1BubbleMs: costs F ${fMs}, B ${bMs}, W ${wMs} must be finite and ≥ 0`);
  }
  return (p - 1) * Math.max(0, fMs + bMs - wMs);
}
