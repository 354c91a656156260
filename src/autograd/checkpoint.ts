/**
 * Activation recomputation (Chen et al., arXiv 1604.06174; Korthikanti et al., arXiv 2205.05198
 * §5; docs/design.md §24): a segment of the forward — one block — runs without keeping its
 * activations; its backward runs it again on a tape of its own, from the saved input, and
 * backpropagates through that. Memory per block drops to its input and output; compute grows by
 * one forward of the segment (and, over a tensor-parallel context, its communication repeats).
 */
import { Tensor } from '../gpu/tensor.ts';
import { axpy } from '../kernels/elementwise.ts';
import type { Tape } from './tape.ts';
import type { RuleTable } from './records.ts';

/**
 * y = run(x) as one `checkpoint` node on `tape`: the forward on a non-recording child tape whose
 * temporaries are freed once y is copied out; the backward (rules: the rule table, passed in
 * because rules.ts depends on this module's node) re-runs `run` on a recording child tape from a
 * copy of x, seeds dy at its output and backpropagates into dx and the shared parameter
 * gradients. On a non-recording tape (evaluation) it is `run(tape, x)`.
 * @param x (…) the segment's input, kept by the caller's tape until its backward.
 * @returns y, the segment's output, owned by `tape`.
 * @throws what `run` throws; in backward, a segment whose recomputed output differs in size.
 */
export async function checkpoint(
  tape: Tape,
  x: Tensor,
  run: (t: Tape, x: Tensor) => Promise<Tensor>,
  name: string,
  rules: () => RuleTable,
): Promise<Tensor> {
  if (!tape.recording) return await run(tape, x);
  const gpu = tape.gpu, scratch = tape.child(false), touched = new Set<Tensor>();
  scratch.observer = (node) => Object.values(node).forEach((v) => v instanceof Tensor && touched.add(v));
  const y0 = await run(scratch, x);
  const y = tape.alloc(y0.shape, name);
  gpu.copy(y0, y);
  scratch.dispose();
  const recompute = async (dy: Tensor | null, dx: Tensor | null) => {
    if (!dy) return;
    // x itself is the child's leaf: its gradient there is a buffer of the child's, added into dx.
    const sub = tape.child(true);
    sub.requireGrad(x);
    const y2 = await run(sub, x);
    if (y2.size !== y.size) {
      throw new Error(`checkpoint ${name}: recomputed output has ${y2.size} elements, the forward had ${y.size}`);
    }
    sub.seed(y2, dy);
    await sub.backwardAsync(rules());
    const gx = sub.gradOf(x);
    if (gx && dx) axpy(gpu, 1, gx, dx);
    sub.dispose();
  };
  tape.record({ op: 'checkpoint', x, y, name, touched: [...touched], recompute }, [x], [y]);
  return y;
}
