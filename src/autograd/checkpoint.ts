/**
 * Activation recomputation (Chen et al., arXiv 1604.06174; Korthikanti et al., arXiv 2205.05198
 * §5; docs/design.md#activation-recomputation): a segment of the forward — one block, or one attention or sequence-
 * mixer core — runs without keeping its activations; its backward runs it again on a tape of its
 * own, from the saved inputs, and backpropagates through that. Memory per segment drops to its
 * inputs and output; compute grows by one forward of the segment (and, over a tensor-parallel
 * context, its communication repeats).
 */
import { Tensor } from '../gpu/tensor.ts';
import type { Tape } from './tape.ts';
import type { RuleTable } from './records.ts';

/**
 * y = run(xs) as one `checkpoint` node on `tape`: the forward on a non-recording child tape whose
 * temporaries are freed once y is copied out; the backward (rules: the rule table, passed in
 * because rules.ts depends on this module's node) re-runs `run` on a recording child tape from
 * the same xs, with dy as its output's gradient, and backpropagates into each input's gradient
 * and the shared parameter gradients. On a non-recording tape (evaluation) it is `run(tape, xs)`.
 * @param xs the segment's activations (the residual stream of a block; q, k, v, … of a core),
 *   kept by the caller's tape until its backward. Every activation `run` reads must be among
 *   them (parameters it may read directly): the gradient of any other would be lost.
 * @returns y, the segment's output, owned by `tape`.
 * @throws Error when the segment reads an activation with a gradient that is not in xs, or
 *   returns one of its inputs; what `run` throws; in backward, a recomputed output that
 *   differs in size.
 */
export async function checkpoint(
  tape: Tape,
  xs: readonly Tensor[],
  run: (t: Tape, xs: readonly Tensor[]) => Promise<Tensor>,
  name: string,
  rules: () => RuleTable,
): Promise<Tensor> {
  if (!tape.recording) return await run(tape, xs);
  const gpu = tape.gpu, scratch = tape.child(false), touched = new Set<Tensor>();
  scratch.observer = (node) => Object.values(node).forEach((v) => v instanceof Tensor && touched.add(v));
  const y0 = await run(scratch, xs);
  // Tensors made inside the segment are unknown to `tape`: what it wants a gradient of and is
  // neither an input nor a parameter is an activation captured from outside.
  const stray = [...touched].find((t) => tape.requiresGrad(t) && !tape.isParameter(t) && !xs.includes(t));
  if (stray || xs.includes(y0)) {
    scratch.dispose();
    throw new Error(
      stray
        ? `checkpoint ${name}: the segment reads '${stray.label}', an activation that is not among its inputs`
        : `checkpoint ${name}: the segment returns its input '${y0.label}'; there is nothing to recompute`,
    );
  }
  const y = tape.alloc(y0.shape, name);
  gpu.copy(y0, y);
  scratch.dispose();
  const recompute = async (dy: Tensor | null, dxs: readonly (Tensor | null)[], deferW?: (child: Tape) => void) => {
    if (!dy) return;
    // The child adds straight into the caller's buffers and reads dy in place: no copies.
    const sub = tape.child(true);
    xs.forEach((x, i) => {
      const dx = dxs[i];
      if (dx) sub.bindGrad(x, dx);
    });
    const y2 = await run(sub, xs);
    if (y2.size !== y.size) {
      throw new Error(`checkpoint ${name}: recomputed output has ${y2.size} elements, the forward had ${y.size}`);
    }
    sub.bindGrad(y2, dy);
    if (deferW) {
      // Phase B only: the recomputed tape lives on until the caller's phase W runs and frees it.
      await sub.backwardInputAsync(rules());
      deferW(sub);
      return;
    }
    await sub.backwardAsync(rules());
    sub.dispose();
  };
  tape.record({ op: 'checkpoint', xs: [...xs], y, name, touched: [...touched], recompute }, xs, [y]);
  return y;
}
