/**
 * Communication as autograd functions (Megatron-LM `core/tensor_parallel/mappings.py`,
 * picotron `tp_communications.py`): a forward that moves or reduces data between ranks and a
 * backward that runs its conjugate collective on the gradient. Both run on the host: a rank
 * reads its tensor back, exchanges it through its Communicator (src/comm), and writes the
 * result — what a simulated rank in a Web Worker can do.
 *
 * One tape op, `collective`, carries any such pair; the named functions in src/parallel build
 * on {@link collectiveOp}. Every rank must reach the same collectives in the same order (the
 * tape is the same program on every rank), and the backward always runs the conjugate
 * collective, with zeros when no gradient reached y, so no peer is left waiting.
 */
import type { Tensor } from '../gpu/tensor.ts';
import { axpy } from '../kernels/elementwise.ts';
import type { Tape } from './tape.ts';
import type { GradContext } from './records.ts';

/** A host-side map of a rank's data, usually a collective over its process group. */
export type HostCollective = (x: Float32Array) => Promise<Float32Array>;

/**
 * y (outShape) = forward(x) on the host; recorded so backward runs dx += backward(dy).
 * @param name the Megatron-style name, for traces and errors.
 * @throws Error when forward returns a length other than outShape's size.
 */
export async function collectiveOp(
  tape: Tape,
  x: Tensor,
  outShape: readonly number[],
  name: string,
  forward: HostCollective,
  backward: HostCollective,
): Promise<Tensor> {
  const host = (await tape.gpu.read(x)) as Float32Array;
  const out = await forward(host);
  const size = outShape.reduce((a, b) => a * b, 1);
  if (out.length !== size) {
    throw new Error(`${name}: forward produced ${out.length} elements for shape [${outShape}] (${size})`);
  }
  const y = tape.alloc(outShape, name);
  tape.gpu.write(y, out);
  tape.record({ op: 'collective', x, y, name, backward }, [x], [y]);
  return y;
}

/** The rule of `collective`: dx += backward(dy), with dy = 0 when nothing flowed into y. */
export async function collectiveRule(
  g: GradContext,
  r: { x: Tensor; y: Tensor; name: string; backward: HostCollective },
): Promise<void> {
  const dy = g.grad(r.y);
  const host = dy ? ((await g.gpu.read(dy)) as Float32Array) : new Float32Array(r.y.size);
  const back = await r.backward(host);
  if (back.length !== r.x.size) {
    throw new Error(`${r.name}: backward produced ${back.length} elements for an input of ${r.x.size}`);
  }
  const dx = g.acc(r.x);
  if (!dx) return;
  const t = g.gpu.upload(back, r.x.shape, 'f32', `${r.name}.dx`);
  axpy(g.gpu, 1, t, dx);
  t.release();
}
