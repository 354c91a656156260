/**
 * A row-parallel layer's bias under tensor parallelism (rank_context.ts, docs/design.md#tensor-parallelism): the
 * partial outputs are summed first and the bias added once after, as y + 1·bᵀ — a 1-input linear
 * whose weight is the bias viewed as a (C, 1) column, so the tape's matmul rule gives its
 * gradient. This holds those column views, made when a tape's gradient map is built.
 */
import type { Tensor } from '../../gpu/tensor.ts';
import type { ParamStore } from '../../nn/params.ts';
import { tpRole } from './tp_table.ts';

/** Row-parallel bias values → their (C, 1) views. */
export class RowBiasColumns {
  private readonly cols = new Map<Tensor, Tensor>();

  /**
   * `store`'s value → gradient map for tapes, plus each row-parallel bias's (C, 1) view → its
   * gradient's view (none with tp = 1). Forgets the views of any earlier store: one rehomed since
   * (ZeRO-2/3) has new value tensors.
   */
  gradMap(store: ParamStore, tp: number): Map<Tensor, Tensor> {
    const map = store.gradMap();
    this.cols.clear();
    if (tp === 1) return map;
    for (const p of store.params) {
      if (!p.name.endsWith('.bias') || !isRow(p.name.replace(/\.bias$/, '.weight'))) continue;
      const col = p.value.view([p.size, 1]);
      this.cols.set(p.value, col);
      map.set(col, p.grad.view([p.size, 1]));
    }
    return map;
  }

  /** The (C, 1) view of bias value `b`, or undefined when {@link gradMap} made none. */
  get(b: Tensor): Tensor | undefined {
    return this.cols.get(b);
  }

  /** Each column view mapped to the bias value it stands for. */
  aliases(): Map<Tensor, Tensor> {
    return new Map([...this.cols].map(([value, col]) => [col, value]));
  }
}

function isRow(name: string): boolean {
  const role = tpRole(name);
  return role === 'row' || role === 'row-inner';
}
